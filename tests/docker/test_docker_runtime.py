"""End to end against a real Docker engine: det-master + a `--runtime docker` agent, the scripted
Core API trial (torch-free) in a bare Debian image with python3 (the agent injects the harness).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import Cluster, wait_for
from tests.docker.conftest import DOCKER_AGENT_ARGS, agent_containers, remove_agent_containers
from tests.docker.image import IMAGE
from tests.fixtures.scripted_config import SCRIPTED_DIR, make_config

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.timeout(600),
]

TERMINAL = {"COMPLETED", "ERROR", "CANCELED"}


def submit(cluster: Cluster, config_text: str, model_dir: Path = SCRIPTED_DIR) -> int:
    cfg = cluster.tmp / f"exp-{os.urandom(4).hex()}.yaml"
    cfg.write_text(config_text)
    out = cluster.det("experiment", "create", str(cfg), str(model_dir)).stdout
    m = re.search(r"Created experiment (\d+)", out)
    assert m, out
    return int(m.group(1))


def config(cluster: Cluster, **kwargs: Any) -> str:
    env = {"image": IMAGE, **kwargs.pop("environment", {})}
    return make_config(cluster.ckpt_dir, environment=env, **kwargs)


def only_trial(cluster: Cluster, exp_id: int) -> dict:
    trials = wait_for(lambda: cluster.experiment(exp_id)["trials"], 30, what="a trial")
    assert len(trials) == 1, trials
    return trials[0]


def running_container(client: Any, agent_id: str, timeout: float = 60) -> Any:
    return wait_for(
        lambda: next(iter(agent_containers(client, agent_id, status="running")), None),
        timeout,
        what=f"a running container of agent {agent_id}",
    )


def test_trial_runs_in_a_container_with_metrics_checkpoints_env_mounts_and_hook(
    dcluster: Cluster, docker_client: Any, tmp_path: Path
) -> None:
    model = tmp_path / "model"
    shutil.copytree(SCRIPTED_DIR, model)
    (model / "startup-hook.sh").write_text('export HOOK_RAN=yes\necho "startup hook ran"\n')
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.txt").write_text("from-the-host\n")
    entrypoint = (
        'echo "MY_VAR=$MY_VAR HOOK_RAN=$HOOK_RAN CUDA=[$CUDA_VISIBLE_DEVICES]"; '
        "test -f /.dockerenv && echo in-a-container; cat /mnt/data/data.txt; "
        "exec python3 trial.py"
    )
    text = config(
        dcluster,
        batches=10,
        hparams={"log_lines": 2, "checkpoint_every": 5},
        # Both checkpoints are checked below: the default policy (latest 1, best 1) lets the
        # master's GC pass (every 5 s, while trials run) delete the one at step 5, which has no
        # validation and is not the latest (a loaded run's failure: its state.json was gone).
        checkpoint_storage={"save_trial_latest": 2},
        entrypoint=entrypoint,
        environment={"environment_variables": ["MY_VAR=hello-env"]},
        bind_mounts=[{"host_path": str(data), "container_path": "/mnt/data", "read_only": True}],
    )
    exp_id = submit(dcluster, text, model)
    d = dcluster.wait_experiment(exp_id, TERMINAL, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", dcluster.diagnose(exp_id)
    trial = d["trials"][0]
    assert trial["steps_completed"] == 10
    metrics = dcluster.get(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    assert [m["steps_completed"] for m in metrics] == list(range(1, 11))
    ckpts = dcluster.det_json("checkpoint", "list", "--trial", str(trial["id"]))
    ckpts = ckpts["checkpoints"] if isinstance(ckpts, dict) else ckpts
    assert sorted((c["steps_completed"], c["state"]) for c in ckpts) == [
        (5, "ACTIVE"),
        (10, "ACTIVE"),
    ]
    for c in ckpts:  # written inside the container, found on the host where the master looks
        assert (dcluster.ckpt_dir / c["uuid"] / "state.json").exists()
    logs = "\n".join(dcluster.logs(trial["id"]))
    for needle in (
        "startup hook ran",
        "MY_VAR=hello-env HOOK_RAN=yes CUDA=[]",
        "in-a-container",
        "from-the-host",
        "log line 2 of 2",
        "validation at step 10",
        "done",
    ):
        assert needle in logs, logs
    # The container is removed once the master has seen it exit.
    wait_for(
        lambda: not agent_containers(docker_client, dcluster.docker_agent),  # type: ignore[attr-defined]
        30,
        what="the container removed",
    )


def test_logs_arrive_live_and_kill_stops_the_container(
    dcluster: Cluster, docker_client: Any
) -> None:
    agent_id = dcluster.docker_agent  # type: ignore[attr-defined]
    text = config(dcluster, batches=100_000, hparams={"sleep": 0.1, "log_lines": 1})
    exp_id = submit(dcluster, text)
    tid = only_trial(dcluster, exp_id)["id"]
    container = running_container(docker_client, agent_id)
    labels = container.labels
    assert labels["ai.detlab.agent"] == agent_id
    assert labels["ai.detlab.trial"] == str(tid)
    assert labels["ai.detlab.experiment"] == str(exp_id)
    assert labels["ai.detlab.allocation"]
    wait_for(lambda: "log line 1 of 1" in dcluster.logs(tid), 60, what="the first line")
    # Live: the line is there while the trial still runs (it would run for hours).
    assert dcluster.get(f"/trials/{tid}")["trial"]["state"] not in TERMINAL
    container.reload()
    assert container.status == "running"
    dcluster.det("experiment", "kill", str(exp_id))
    d = dcluster.wait_experiment(exp_id, TERMINAL, timeout=60)
    assert d["experiment"]["state"] == "CANCELED", dcluster.diagnose(exp_id)
    wait_for(lambda: not agent_containers(docker_client, agent_id), 30, what="container removed")
    assert any("stopping the container" in line for line in dcluster.logs(tid))


def test_a_bad_image_fails_the_trial_fast_with_a_clear_error(dcluster: Cluster) -> None:
    text = config(dcluster, environment={"image": "detlab-no-such-image:nope"}, max_restarts=0)
    t0 = time.monotonic()
    exp_id = submit(dcluster, text)
    d = dcluster.wait_experiment(exp_id, TERMINAL, timeout=120)
    assert d["experiment"]["state"] == "ERROR", dcluster.diagnose(exp_id)
    assert time.monotonic() - t0 < 60
    logs = "\n".join(dcluster.logs(d["trials"][0]["id"]))
    assert "cannot pull the image 'detlab-no-such-image:nope'" in logs, logs


def test_failed_containers_are_kept_for_debugging(dcluster: Cluster, docker_client: Any) -> None:
    agent_id = dcluster.docker_agent  # type: ignore[attr-defined]
    text = config(dcluster, batches=2, hparams={"exit_code": 3}, max_restarts=0)
    exp_id = submit(dcluster, text)
    d = dcluster.wait_experiment(exp_id, TERMINAL, timeout=120)
    assert d["experiment"]["state"] == "ERROR", dcluster.diagnose(exp_id)
    kept = wait_for(
        lambda: agent_containers(docker_client, agent_id, status="exited"), 30, what="kept"
    )
    assert len(kept) == 1 and kept[0].attrs["State"]["ExitCode"] == 3
    # --keep-failed-containers 1: a second failure replaces the first.
    exp2 = submit(dcluster, text)
    dcluster.wait_experiment(exp2, TERMINAL, timeout=120)
    left = wait_for(
        lambda: (
            (ids := [c.id for c in agent_containers(docker_client, agent_id)])
            and len(ids) == 1
            and ids[0] != kept[0].id
            and ids
        ),
        30,
        what="only the newer failed container kept",
    )
    assert len(left) == 1


def test_a_restarted_agent_reattaches_without_gaps_or_duplicates(
    dcluster: Cluster, docker_client: Any
) -> None:
    agent_id = dcluster.docker_agent  # type: ignore[attr-defined]
    n = 80
    entrypoint = f"for i in $(seq 1 {n}); do echo tick $i; sleep 0.1; done; exec python3 trial.py"
    exp_id = submit(dcluster, config(dcluster, batches=3, entrypoint=entrypoint))
    tid = only_trial(dcluster, exp_id)["id"]
    container = running_container(docker_client, agent_id)
    wait_for(lambda: "tick 15" in dcluster.logs(tid), 60, what="tick 15")
    dcluster.stop_agent(agent_id, signal.SIGKILL)
    # The agent may die after the master stored lines but before it recorded their delivery.
    # Make that window certain: move the saved position back by about ten lines.
    (saved,) = (dcluster.tmp / f"work-{agent_id}" / "docker").glob("*.json")
    state = json.loads(saved.read_text())
    state["delivered"] = {"ns": state["delivered"]["ns"] - 1_000_000_000, "count": 1}
    saved.write_text(json.dumps(state))
    # The trial keeps printing while no agent watches it (seen in the container's own log).
    wait_for(lambda: b"tick 25" in container.logs(), 60, what="tick 25 without an agent")
    container.reload()
    assert container.status == "running"
    dcluster.start_agent(agent_id, 1, *DOCKER_AGENT_ARGS)
    d = dcluster.wait_experiment(exp_id, TERMINAL, timeout=120)
    assert d["experiment"]["state"] == "COMPLETED", dcluster.diagnose(exp_id)
    logs = dcluster.logs(tid)
    ticks = [line for line in logs if line.startswith("tick ")]
    assert ticks == [f"tick {i}" for i in range(1, n + 1)], ticks
    assert any("re-attached" in line for line in logs)
    assert "re-attached to container" in dcluster.read_log(agent_id)


def test_a_restarted_agent_kills_containers_the_master_no_longer_wants(
    dcluster: Cluster, docker_client: Any
) -> None:
    agent_id = dcluster.docker_agent  # type: ignore[attr-defined]
    exp_id = submit(dcluster, config(dcluster, batches=100_000, hparams={"sleep": 0.1}))
    only_trial(dcluster, exp_id)
    running_container(docker_client, agent_id)
    dcluster.stop_agent(agent_id, signal.SIGKILL)
    dcluster.det("experiment", "kill", str(exp_id))
    dcluster.start_agent(agent_id, 1, *DOCKER_AGENT_ARGS)
    d = dcluster.wait_experiment(exp_id, TERMINAL, timeout=60)
    assert d["experiment"]["state"] == "CANCELED", dcluster.diagnose(exp_id)
    wait_for(lambda: not agent_containers(docker_client, agent_id), 30, what="container removed")


def test_an_oom_killed_trial_is_reported_as_such(
    cluster_factory, docker_agent: str, docker_client: Any, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(db="sqlite")
    cluster.start_agent(docker_agent, 1, *DOCKER_AGENT_ARGS, "--container-memory-limit", "64m")
    model = tmp_path / "hog"
    model.mkdir()
    (model / "hog.py").write_text(
        "print('allocating', flush=True)\nblocks = [bytearray(16 * 2**20) for _ in range(64)]\n"
    )
    text = make_config(
        cluster.ckpt_dir, environment={"image": IMAGE}, max_restarts=0, entrypoint="python3 hog.py"
    )
    exp_id = submit(cluster, text, model)
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=120)
    assert d["experiment"]["state"] == "ERROR", cluster.diagnose(exp_id)
    logs = "\n".join(cluster.logs(d["trials"][0]["id"]))
    assert "allocating" in logs
    assert "the trial ran out of memory: the container was OOM-killed" in logs, logs


def test_a_lost_docker_agents_trial_resumes_from_its_checkpoint_on_another_agent(
    cluster_factory, docker_agent: str, docker_client: Any
) -> None:  # type: ignore[no-untyped-def]
    # The host of agent A dies (agent process and its containers gone) on PostgreSQL: the master
    # marks A lost and the trial restarts on agent B from its latest checkpoint.
    cluster = cluster_factory(db="postgres", agent_timeout=5)
    doomed, survivor = docker_agent, f"{docker_agent}-b"
    try:
        cluster.start_agent(doomed, 1, *DOCKER_AGENT_ARGS)
        text = config(
            cluster, batches=200, max_restarts=3, hparams={"sleep": 0.05, "checkpoint_every": 20}
        )
        exp_id = submit(cluster, text)
        tid = only_trial(cluster, exp_id)["id"]
        cluster.wait_trial(
            tid, lambda t: t["agent_id"] == doomed and t["steps_completed"] >= 45, timeout=180
        )
        cluster.stop_agent(doomed, signal.SIGKILL)
        remove_agent_containers(docker_client, doomed)  # the host is gone, its containers too
        cluster.start_agent(survivor, 1, *DOCKER_AGENT_ARGS)
        d = cluster.wait_experiment(exp_id, TERMINAL, timeout=300)
        assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
        assert d["trials"][0]["restarts"] == 1
        agents = cluster.det_json("agent", "list")
        agents = agents["agents"] if isinstance(agents, dict) else agents
        assert {a["id"]: a["state"] for a in agents}[doomed] == "LOST"
        logs = "\n".join(cluster.logs(tid))
        assert f"agent {doomed} was lost" in logs
        assert f"scheduled on agent {survivor}" in logs
        m = re.search(r"resumed from \S+ at step (\d+)", logs)
        assert m and int(m.group(1)) >= 40 and int(m.group(1)) % 20 == 0, logs[-3000:]
        steps = [
            r["steps_completed"]
            for r in cluster.get(f"/trials/{tid}/metrics", group="training")["metrics"]
        ]
        assert steps[-1] == 200 and set(range(1, 201)) <= set(steps)
    finally:
        remove_agent_containers(docker_client, survivor)
