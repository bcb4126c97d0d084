"""The first hour with `det` (issue 32), against a real master and agent: what a new user types."""

from __future__ import annotations

import csv
import io
import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.cluster import BIN, Cluster, free_port, wait_for
from tests.fixtures.scripted_config import SCRIPTED_DIR, make_config

pytestmark = pytest.mark.integration


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_first_experiment_through_the_cli(cluster: Cluster, tmp_path: Path) -> None:
    cfg = make_config(
        cluster.ckpt_dir,
        batches=20,
        max_restarts=2,
        name="first-hour",
        hparams={"fail_at_step": 5, "fail_times": 1, "checkpoint_every": 10},
    )
    r = cluster.det("experiment", "create", write(tmp_path, "c.yaml", cfg), str(SCRIPTED_DIR), "-f")
    exp_id = int(re.search(r"Created experiment (\d+)", r.stdout).group(1))
    lines = r.stdout.splitlines()
    # not a terminal: said so, and progress comes as plain lines
    assert any("not a terminal" in ln for ln in lines), r.stdout
    assert f"experiment {exp_id}: 100% (COMPLETED)" in lines
    # the end state only after the trial's last lines, and never a STOPPING_ state before them
    last_log = max(i for i, ln in enumerate(lines) if ln.startswith("[trial "))
    assert lines.index(f"Experiment {exp_id} is COMPLETED") > last_log
    assert not any("STOPPING_" in ln for ln in lines if ln.startswith("Experiment "))
    trial_id = cluster.experiment(exp_id)["trials"][0]["id"]

    # trial describe: restarts counted right, one time format, no empty lines
    out = cluster.det("trial", "describe", str(trial_id)).stdout
    assert re.search(r"^Restarts:\s+1$", out, re.M), out
    assert re.search(r"^Created:\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", out, re.M), out
    assert not re.search(r"^[A-Z][\w ]*:\s*$", out, re.M), f"an empty line: {out}"
    assert "Exit reason" not in out and "Agent:" not in out

    # experiment describe: the searcher metric as a number, not a JSON dict
    out = cluster.det("experiment", "describe", str(exp_id)).stdout
    assert "BEST and LATEST: loss (the searcher metric)" in out
    row = out.splitlines()[-1]
    assert "{" not in row and len(row) < 200, row

    # trial metrics: table, CSV, JSON, one group
    out = cluster.det("trial", "metrics", str(trial_id)).stdout
    assert out.splitlines()[0].split()[:3] == ["GROUP", "STEPS", "loss"], out
    assert any(ln.startswith("validation") for ln in out.splitlines())
    rows = list(
        csv.DictReader(io.StringIO(cluster.det("trial", "metrics", str(trial_id), "--csv").stdout))
    )
    assert {"group", "steps", "loss"} <= set(rows[0]) and rows[-1]["group"] == "validation"
    val = json.loads(
        cluster.det("trial", "metrics", str(trial_id), "--group", "validation", "--json").stdout
    )
    assert val and all(m["group"] == "validation" for m in val)
    assert val[-1]["steps_completed"] == 20

    # unknown trial / experiment: not found, exit 1 (not an empty table)
    for flag in ("--trial", "--experiment"):
        r = cluster.det("checkpoint", "list", flag, "999", check=False)
        assert r.returncode == 1 and "999 not found" in r.stderr, r
    r = cluster.det("trial", "metrics", "999", check=False)
    assert r.returncode == 1 and "trial 999 not found" in r.stderr


def test_a_typo_in_the_entrypoint_is_caught_before_upload(cluster: Cluster, tmp_path: Path) -> None:
    cfg = make_config(cluster.ckpt_dir, batches=5).replace("trial.py", "trail.py")
    r = cluster.det(
        "experiment", "create", write(tmp_path, "c.yaml", cfg), str(SCRIPTED_DIR), check=False
    )
    assert r.returncode == 1
    assert "trail.py" in r.stderr and "did you mean trial.py?" in r.stderr, r.stderr
    assert cluster.get("/experiments")["experiments"] == []


def test_messages_for_people(cluster: Cluster, tmp_path: Path) -> None:
    # an unreachable master is said so, before any "log in"
    env = {**cluster.env(), "DET_CONFIG_DIR": str(tmp_path / "nobody")}
    del env["DET_USER"], env["DET_PASSWORD"]
    url = f"http://127.0.0.1:{free_port()}"
    for cmd in (
        [str(BIN / "det"), "-m", url, "experiment", "list"],
        [str(BIN / "det-tui"), "-m", url],
    ):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r
        assert f"cannot reach the master at {url} (is it running? check DET_MASTER or -m)" in (
            r.stderr
        ), r.stderr
        assert "login" not in r.stderr
    # user create without a terminal or a password: a clear error, no traceback
    r = subprocess.run(
        [str(BIN / "det"), "user", "create", "bob"],
        env=cluster.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "--password" in r.stderr
    # a user with no experiments is pointed at --all
    cluster.det("user", "create", "bob", "--password", "bob-password")
    env = {**cluster.env(), "DET_USER": "bob", "DET_PASSWORD": "bob-password"}
    r = subprocess.run(
        [str(BIN / "det"), "experiment", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "det experiment list --all" in r.stdout, r


def test_ctrl_c_while_following_leaves_the_experiment_running(
    cluster: Cluster, tmp_path: Path
) -> None:
    cfg = make_config(cluster.ckpt_dir, batches=100000, hparams={"sleep": 0.05})
    proc = subprocess.Popen(
        [
            str(BIN / "det"),
            "experiment",
            "create",
            write(tmp_path, "c.yaml", cfg),
            str(SCRIPTED_DIR),
            "-f",
        ],
        env=cluster.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    exp_id = int(re.search(r"Created experiment (\d+)", first).group(1))
    wait_for(
        lambda: (
            cluster.experiment(exp_id)["trials"]
            and cluster.experiment(exp_id)["trials"][0].get("display_state") == "RUNNING"
        ),
        120,
        what="a running trial",
    )
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert f"experiment {exp_id} keeps running" in err, err
    assert f"det experiment logs {exp_id} -f" in err
    assert "Traceback" not in err
    assert cluster.experiment(exp_id)["experiment"]["state"] == "ACTIVE"
    cluster.post(f"/experiments/{exp_id}/kill")


def test_an_agent_whose_credential_is_refused_says_so_and_backs_off(cluster: Cluster) -> None:
    """An admin reset the agent's credential: the agent's log speaks of credentials and the
    agent token, not of `det user login`, and does not repeat itself every second."""
    wait_for(
        lambda: "registered with the master" in cluster.read_log("agent-1"),
        60,
        what="the agent's first poll reply",
    )
    cluster.det("agent", "reset-credential", "agent-1")
    wait_for(
        lambda: "refused this agent's credential" in cluster.read_log("agent-1"),
        90,
        what="the agent's refusal line",
    )
    log = cluster.read_log("agent-1")
    assert "det user login" not in log
    assert "DET_AGENT_TOKEN" in log and "reset-credential" in log
    assert log.count("refused this agent's credential") == 1, "once a minute at most"


def test_moving_a_job_ahead_says_its_priority_changed(cluster: Cluster, tmp_path: Path) -> None:
    ids = []
    for name, priority in (("busy", 42), ("b", 42), ("c", 30)):
        cfg = make_config(
            cluster.ckpt_dir,
            batches=100000,
            name=name,
            hparams={"sleep": 0.05},
            resources={"priority": priority},
        )
        path = write(tmp_path, f"{name}.yaml", cfg)
        r = cluster.det("experiment", "create", path, str(SCRIPTED_DIR))
        ids.append(int(re.search(r"Created experiment (\d+)", r.stdout).group(1)))
    busy, b, c = ids
    try:
        out = cluster.det("job", "update", str(b), "--ahead-of", str(c)).stdout
        assert "priority 30" in out and "Note: priority changed from 42 to 30" in out, out
        out = cluster.det("job", "list").stdout
        assert "WAITING SINCE" in out.splitlines()[1], out
    finally:
        for exp_id in ids:
            cluster.post(f"/experiments/{exp_id}/kill")
