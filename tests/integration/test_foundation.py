"""End to end: det-master + det-agent processes on 127.0.0.1, driven through the `det` CLI."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.cluster import Cluster, wait_for
from tests.fixtures.scripted_config import SCRIPTED_DIR, make_config

pytestmark = pytest.mark.integration


def submit(cluster: Cluster, config_text: str, model_dir: Path = SCRIPTED_DIR, *flags: str) -> int:
    cfg = cluster.tmp / f"exp-{os.urandom(4).hex()}.yaml"
    cfg.write_text(config_text)
    out = cluster.det("experiment", "create", str(cfg), str(model_dir), *flags).stdout
    m = re.search(r"Created experiment (\d+)", out)
    assert m, out
    return int(m.group(1))


def only_trial(cluster: Cluster, exp_id: int) -> dict:
    trials = cluster.experiment(exp_id)["trials"]
    assert len(trials) == 1, trials
    return trials[0]


def test_experiment_trains_to_completion_with_metrics_logs_and_checkpoint(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    # On an empty database, as on a first start: the master runs every migration itself (the
    # other tests start on a copy of the migrated template, tests/pgtemplate.py).
    cluster = cluster_factory(migrated=False)
    cluster.start_agent("agent-1", slots=1)
    config = make_config(
        cluster.ckpt_dir, batches=30, hparams={"log_lines": 3, "checkpoint_every": 10}
    )
    exp_id = submit(cluster, config)
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"})
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    assert d["experiment"]["progress"] == 1.0
    trial = d["trials"][0]
    assert trial["state"] == "COMPLETED" and trial["steps_completed"] == 30
    described = cluster.det_json("trial", "describe", str(trial["id"]))
    assert json.dumps(described).count(str(trial["id"])) >= 1
    metrics = cluster.get(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    assert [m["steps_completed"] for m in metrics] == list(range(1, 31))
    val = cluster.get(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert val[-1]["steps_completed"] == 30 and val[-1]["metrics"]["loss"] == pytest.approx(1 / 31)
    ckpts = cluster.det_json("checkpoint", "list", "--trial", str(trial["id"]))
    ckpts = ckpts["checkpoints"] if isinstance(ckpts, dict) else ckpts
    assert sorted(c["steps_completed"] for c in ckpts) == [10, 20, 30]
    latest = max(ckpts, key=lambda c: c["steps_completed"])
    assert (cluster.ckpt_dir / latest["uuid"] / "state.json").exists()
    # The default GC policy (best + latest per trial) may collect the others: files and state
    # agree either way (docs/checkpoints.md).
    for c in ckpts:
        wait_for(
            lambda c=c: (
                (
                    (d := cluster.det_json("checkpoint", "describe", c["uuid"]))["state"]
                    == "ACTIVE"
                    and (cluster.ckpt_dir / c["uuid"] / "state.json").exists()
                )
                or (d["state"] == "DELETED" and not (cluster.ckpt_dir / c["uuid"]).exists())
            ),
            30,
            0.3,
            what=f"checkpoint {c['uuid']} kept with its files or deleted without",
        )
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    for needle in ("log line 3 of 3", "validation at step 30", "done"):
        assert needle in logs
    listed = cluster.det("experiment", "list").stdout
    assert "COMPLETED" in listed and "scripted" in listed


def test_pause_then_activate_resumes_from_the_checkpoint(cluster: Cluster) -> None:
    config = make_config(cluster.ckpt_dir, batches=400, hparams={"sleep": 0.02})
    exp_id = submit(cluster, config)
    tid = only_trial(cluster, exp_id)["id"]
    cluster.wait_trial(tid, lambda t: t["steps_completed"] >= 20, what="20 steps")
    cluster.det("experiment", "pause", str(exp_id))
    cluster.wait_trial(
        tid,
        lambda t: t["state"] == "PAUSED" and t["allocation_id"] is None,
        what="trial paused and its process gone",
    )
    paused = cluster.get(f"/trials/{tid}")["trial"]
    assert paused["latest_checkpoint"], "a paused trial checkpoints on the preemption signal"
    steps_at_pause = paused["steps_completed"]
    assert 20 <= steps_at_pause < 400
    agents = cluster.get("/agents")["agents"]
    assert all(s["allocation_id"] is None for a in agents for s in a["slots"]), "slot freed"
    cluster.det("experiment", "activate", str(exp_id))
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"})
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    logs = "\n".join(cluster.logs(tid))
    assert f"preempted at step {steps_at_pause}" in logs
    m = re.search(r"resumed from \S+ at step (\d+)", logs)
    assert m and int(m.group(1)) == steps_at_pause, logs[-2000:]
    steps = [
        m["steps_completed"]
        for m in cluster.get(f"/trials/{tid}/metrics", group="training")["metrics"]
    ]
    assert steps == sorted(steps) and steps[-1] == 400
    assert len(steps) == len(set(steps)), "no step was trained twice"


def test_kill_stops_the_process(cluster: Cluster) -> None:
    config = make_config(
        cluster.ckpt_dir,
        batches=100000,
        hparams={"sleep": 0.05, "ignore_preemption": True, "pid_file": True},
    )
    exp_id = submit(cluster, config)
    tid = only_trial(cluster, exp_id)["id"]
    cluster.wait_trial(tid, lambda t: t["display_state"] == "RUNNING" and t["steps_completed"] > 0)
    pid = int((cluster.ckpt_dir / f".scripted-pid-{tid}").read_text())
    assert process_alive(pid), "the trial's process runs before the kill"
    cluster.det("experiment", "kill", str(exp_id))
    d = cluster.wait_experiment(exp_id, {"CANCELED"}, timeout=60)
    assert d["trials"][0]["state"] == "CANCELED"
    # The process itself is gone (ignore_preemption: it would train forever otherwise).
    wait_for(lambda: not process_alive(pid), 30, what=f"the trial's process {pid} to end")
    r = cluster.det("experiment", "activate", str(exp_id), check=False)
    assert r.returncode != 0 and "CANCELED" in r.stderr


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_crashing_trial_restarts_then_errors_after_max_restarts(cluster: Cluster) -> None:
    config = make_config(cluster.ckpt_dir, batches=20, max_restarts=2, hparams={"fail_at_step": 5})
    exp_id = submit(cluster, config)
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"})
    assert d["experiment"]["state"] == "ERROR"
    trial = d["trials"][0]
    assert trial["state"] == "ERROR" and trial["restarts"] == 2  # 3 attempts, 2 restarts
    logs = "\n".join(cluster.logs(trial["id"]))
    assert logs.count("failing at step 5") == 3
    assert "RuntimeError: scripted failure at step 5" in logs  # the user's traceback is shown
    assert "max_restarts=2 reached" in logs


def test_crash_restarts_from_the_latest_checkpoint(cluster: Cluster) -> None:
    config = make_config(
        cluster.ckpt_dir,
        batches=20,
        max_restarts=2,
        hparams={"fail_at_step": 15, "fail_times": 1, "checkpoint_every": 10},
    )
    exp_id = submit(cluster, config)
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"})
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    trial = d["trials"][0]
    assert trial["restarts"] == 1
    assert re.search(r"resumed from \S+ at step 10", "\n".join(cluster.logs(trial["id"])))


def test_trial_of_a_killed_agent_restarts_on_another_agent(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(agent_timeout=3)
    cluster.start_agent("doomed", slots=1)
    config = make_config(
        cluster.ckpt_dir,
        batches=300,
        max_restarts=3,
        hparams={"sleep": 0.02, "checkpoint_every": 20},
    )
    exp_id = submit(cluster, config)
    tid = only_trial(cluster, exp_id)["id"]
    cluster.wait_trial(tid, lambda t: t["agent_id"] == "doomed" and t["steps_completed"] >= 40)
    cluster.start_agent("survivor", slots=1)
    cluster.stop_agent("doomed", signal.SIGKILL)
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"}, timeout=120)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    assert d["trials"][0]["restarts"] == 1
    agents = (
        {a["id"]: a["state"] for a in cluster.det_json("agent", "list")["agents"]}
        if isinstance(cluster.det_json("agent", "list"), dict)
        else {a["id"]: a["state"] for a in cluster.det_json("agent", "list")}
    )
    assert agents["doomed"] == "LOST"
    logs = "\n".join(cluster.logs(tid))
    assert "agent doomed was lost" in logs
    assert "scheduled on agent survivor" in logs
    assert re.search(r"resumed from \S+ at step \d+", logs)
    # The steps re-done after the restore replace the lost run's: each step counts once.
    metrics = cluster.get(f"/trials/{tid}/metrics", group="training")["metrics"]
    assert [m["steps_completed"] for m in metrics] == list(range(1, 301))


def test_bad_input_gets_clear_errors(cluster: Cluster) -> None:
    bad = make_config(cluster.ckpt_dir).replace("max_length", "max_lenght")
    cfg = cluster.tmp / "bad.yaml"
    cfg.write_text(bad)
    r = cluster.det("experiment", "create", str(cfg), str(SCRIPTED_DIR), check=False)
    assert r.returncode != 0
    assert "searcher.max_lenght" in r.stderr and "Traceback" not in r.stderr
    env = cluster.env()
    env.pop("DET_USER"), env.pop("DET_PASSWORD")
    import subprocess

    from tests.cluster import BIN

    r = subprocess.run(
        [str(BIN / "det"), "experiment", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0 and "det user login" in r.stderr
    import requests

    r = requests.get(cluster.url + "/api/v1/experiments", timeout=10)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"


def test_invalid_hp_ends_the_trial_without_restarts(cluster: Cluster) -> None:
    exp_id = submit(
        cluster, make_config(cluster.ckpt_dir, max_restarts=3, hparams={"invalid_hp": True})
    )
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"})
    trial = d["trials"][0]
    assert trial["restarts"] == 0
    assert trial["exit_reason"] == "INVALID_HP"
    assert "invalid hyperparameters" in "\n".join(cluster.logs(trial["id"]))


def test_master_restart_mid_trial_loses_nothing(cluster: Cluster) -> None:
    config = make_config(cluster.ckpt_dir, batches=250, hparams={"sleep": 0.02})
    exp_id = submit(cluster, config)
    tid = only_trial(cluster, exp_id)["id"]
    cluster.wait_trial(tid, lambda t: t["steps_completed"] >= 30, what="30 steps")
    cluster.stop_master()
    cluster.start_master()
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"})
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    trial = d["trials"][0]
    assert trial["restarts"] == 0, "the trial kept running through the master restart"
    metrics = cluster.get(f"/trials/{tid}/metrics", group="training")["metrics"]
    assert [m["steps_completed"] for m in metrics] == list(range(1, 251)), "no report lost"
