"""A newcomer's first-day traps, with real master and agent processes and the `det` CLI: a
template typo refused on set, an experiment too big for its pool warned about (or refused), an
agent given an unknown pool stopping with the list of pools, an agent without a token told where
the master keeps it, and LOST agents ageing out of the default agent views."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.cluster import BIN, Cluster, wait_for
from tests.fixtures.scripted_config import SCRIPTED_DIR, make_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def write(cluster: Cluster, name: str, text: str) -> str:
    path = cluster.tmp / name
    path.write_text(text)
    return str(path)


def test_template_set_refuses_a_typo_with_the_schemas_hint(cluster: Cluster) -> None:
    bad = write(cluster, "bad.yaml", "resources:\n  priorty: 10\n")
    r = cluster.det("template", "set", "lab", bad, check=False)
    assert r.returncode != 0
    assert "resources.priorty: unknown key; did you mean priority?" in r.stderr, r.stderr
    assert cluster.det_json("template", "list") == []  # nothing stored
    wrong_type = write(cluster, "type.yaml", "max_restarts: many\n")
    r = cluster.det("template", "set", "lab", wrong_type, check=False)
    assert r.returncode != 0 and "max_restarts" in r.stderr, r.stderr
    # A template is partial: no entrypoint, a searcher without its metric are fine.
    good = write(
        cluster,
        "good.yaml",
        "resources: {priority: 10}\nsearcher: {smaller_is_better: false}\nmax_restarts: 1\n",
    )
    cluster.det("template", "set", "lab", good)
    assert cluster.det_json("template", "describe", "lab")["config"]["max_restarts"] == 1


def test_an_experiment_too_big_for_its_pool_is_warned_about_or_refused(cluster: Cluster) -> None:
    text = make_config(cluster.ckpt_dir, resources={"slots_per_trial": 2})
    cfg = write(cluster, "two.yaml", text)
    r = cluster.det(
        "experiment", "create", "--fail-if-cannot-fit", cfg, str(SCRIPTED_DIR), check=False
    )
    assert r.returncode != 0
    assert "resources.slots_per_trial is 2 but resource pool 'default' has 1 slot" in r.stderr
    assert cluster.get("/experiments")["experiments"] == []  # nothing created
    r = cluster.det("experiment", "create", cfg, str(SCRIPTED_DIR))
    assert re.search(r"Created experiment \d+", r.stdout), r.stdout
    assert "warning: resources.slots_per_trial is 2 but resource pool 'default' has 1 slot" in (
        r.stderr
    ), r.stderr
    assert "--fail-if-cannot-fit" in r.stderr
    # One that fits: no warning.
    ok = write(cluster, "one.yaml", make_config(cluster.ckpt_dir))
    r = cluster.det("experiment", "create", "--fail-if-cannot-fit", ok, str(SCRIPTED_DIR))
    assert "slots_per_trial" not in r.stderr, r.stderr


def run_agent(
    cluster: Cluster, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    # Each run keeps its credential in its own data dir: the default one is shared by every
    # cluster on the machine, where an earlier cluster's credential for the same agent id is
    # refused (401) before the pool is ever checked.
    if "--data-dir" not in args:
        args = ("--data-dir", tempfile.mkdtemp(prefix="agent-data-", dir=cluster.tmp), *args)
    return subprocess.run(
        [str(BIN / "det-agent"), "--master", cluster.url, "--slots", "1", *args],
        env=env or cluster.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_agent_given_an_unknown_pool_exits_with_the_pools(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = cluster_factory(db="sqlite")
    r = run_agent(
        c, "--agent-id", "gpu-box", "--resource-pool", "gpu", "--work-dir", str(c.tmp / "w")
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert "unknown resource pool 'gpu'; this master has default" in r.stderr, r.stderr[-2000:]
    assert "--resource-pool" in r.stderr
    assert r.stderr.count("unknown resource pool") <= 3  # said, not retried forever


def test_an_agent_without_a_token_is_told_where_the_master_keeps_it(
    cluster_factory,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    c = cluster_factory(db="sqlite", start=False)
    env = {k: v for k, v in c.env().items() if k != "DET_AGENT_TOKEN"}
    r = run_agent(c, "--data-dir", str(tmp_path / "agent-data"), env=env)
    assert r.returncode == 2
    assert "agent_token in the MASTER's data dir (det-master --data-dir" in r.stderr, r.stderr
    assert "DET_AGENT_TOKEN=$(ssh MASTER-HOST cat MASTER-DATA-DIR/agent_token)" in r.stderr
    assert str(tmp_path / "agent-data" / "agent_token") in r.stderr  # where it looked


def test_lost_agents_age_out_of_the_default_views(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = cluster_factory(db="sqlite", agent_timeout=3, master_yaml="lost_agent_retention: 15\n")
    c.start_agent("stays", 1)
    c.start_agent("goes", 1)
    c.stop_agent("goes", signal.SIGKILL)

    def shown(**params: str) -> dict[str, str]:
        return {a["id"]: a["state"] for a in c.get("/agents", **params)["agents"]}

    # LOST agents stay listed for lost_agent_retention after they were last seen ...
    wait_for(lambda: shown().get("goes") == "LOST", 60, what="the killed agent LOST and listed")
    # ... then only --all / ?all=true shows them.
    wait_for(lambda: "goes" not in shown(), 60, what="the LOST agent out of the default list")
    assert shown() == {"stays": "ACTIVE"}
    assert shown(all="true") == {"stays": "ACTIVE", "goes": "LOST"}
    assert {a["id"] for a in c.det_json("agent", "list")} == {"stays"}
    assert {a["id"]: a["state"] for a in c.det_json("agent", "list", "--all")} == {
        "stays": "ACTIVE",
        "goes": "LOST",
    }
    table = c.det("agent", "list").stdout
    assert "stays" in table and "goes" not in table


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_a_bad_lost_agent_retention_is_refused_at_start(tmp_path: Path, value: str) -> None:
    cfg = tmp_path / "master.yaml"
    cfg.write_text(f"lost_agent_retention: {value}\n")
    r = subprocess.run(
        [str(BIN / "det-master"), "--config", str(cfg), "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DET_ADMIN_PASSWORD": "x"},
    )
    assert r.returncode != 0
    assert "lost_agent_retention must be a number >= 0" in r.stderr, r.stderr
