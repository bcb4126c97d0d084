"""Determined 0.38's core_v2: unmanaged runs off the cluster report to a real master (which never
schedules them), and the same script runs managed on the cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster import Cluster, wait_for
from tests.compat._util import SCRIPTS, config, run

pytestmark = pytest.mark.integration


def run_unmanaged(cluster: Cluster, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "core_v2_script.py")],
        env={**cluster.env(), "CKPT_DIR": str(cluster.ckpt_dir), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def only_experiment(cluster: Cluster) -> dict:
    (exp,) = cluster.get("/experiments")["experiments"]
    return exp


def test_unmanaged_run_reports_metrics_and_checkpoints_and_completes(
    cluster_factory, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()  # no agent at all: nothing is scheduled for an unmanaged run
    proc = run_unmanaged(cluster, tmp_path)
    assert proc.returncode == 0, proc.stderr
    exp = only_experiment(cluster)
    d = cluster.experiment(exp["id"])
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp["id"])
    assert d["experiment"]["name"] == "core-v2-run"
    (trial,) = d["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert trial["hparams"] == {"lr": 0.5, "steps": 6}
    assert trial["best_validation"] == pytest.approx(1 / 64)
    train = cluster.get(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    assert [m["steps_completed"] for m in train] == [1, 2, 3, 4, 5, 6]
    (ckpt,) = cluster.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert (Path(ckpt["storage"]["path"]) / "state.json").is_file()
    cfg = cluster.get(f"/experiments/{exp['id']}/config")["config"]
    assert cfg["unmanaged"] is True and "notebook-7" in cfg["description"]


def test_unmanaged_run_that_raises_ends_error_and_shows_running_while_it_runs(
    cluster_factory, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    proc = run_unmanaged(cluster, tmp_path, FAIL_AT_END="1")
    assert proc.returncode == 1 and "the script failed after training" in proc.stderr
    exp = only_experiment(cluster)
    d = cluster.experiment(exp["id"])
    assert d["experiment"]["state"] == "ERROR", cluster.diagnose(exp["id"])
    assert d["trials"][0]["state"] == "ERROR"
    assert "the script failed after training" in "\n".join(cluster.logs(d["trials"][0]["id"]))


def test_an_unmanaged_trial_is_never_scheduled_and_shows_running(cluster: Cluster) -> None:
    # Created as the SDK does, with an agent free: the master must not start it anywhere.
    text = "name: u\nunmanaged: true\nsearcher: {name: single, metric: loss}\n"
    r = cluster.request(
        "POST", "/experiments", files={"config": (None, text, "application/yaml")}, timeout=30
    )
    assert r.status_code == 201, r.text
    exp_id = r.json()["experiment"]["id"]
    (trial,) = cluster.experiment(exp_id)["trials"]
    assert trial["display_state"] == "RUNNING" and trial["allocation_id"] is None
    pools = cluster.get("/job-queues")["pools"]
    assert all(job["job_id"] != str(exp_id) for p in pools for job in p["jobs"])
    # A managed trial of another experiment runs meanwhile: the agent was free all along.
    d = run(cluster, config(cluster, {"name": "single", "max_length": 2}, {"max_length": 2}))
    assert d["experiment"]["state"] == "COMPLETED"
    assert cluster.experiment(exp_id)["trials"][0]["allocation_id"] is None
    # Its end comes from the script (core_v2.close): exit 0 is COMPLETED.
    r = cluster.post(f"/trials/{trial['id']}/unmanaged/exit", {"exit_code": 0})
    assert r.status_code == 200, r.text
    wait_for(lambda: cluster.experiment(exp_id)["experiment"]["state"] == "COMPLETED", 30)
    again = cluster.post(f"/trials/{trial['id']}/unmanaged/exit", {"exit_code": 0})
    assert again.status_code == 409
    managed = cluster.experiment(d["experiment"]["id"])["trials"][0]["id"]
    # A managed trial is not the user's to end this way (its allocation reports its exit).
    assert cluster.post(f"/trials/{managed}/unmanaged/exit", {"exit_code": 0}).status_code == 403


def test_the_same_core_v2_script_runs_managed_on_the_cluster(cluster: Cluster) -> None:
    text = config(cluster, {"name": "single", "max_length": 6}, {"lr": 0.1}).replace(
        "python3 core_script.py", "python3 core_v2_script.py"
    )
    d = run(cluster, text)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(d["experiment"]["id"])
    (trial,) = d["trials"]
    assert trial["hparams"] == {"lr": 0.1}  # the experiment's config wins over the defaults
    assert trial["best_validation"] == pytest.approx(1 / 64)
    assert len(cluster.get("/experiments")["experiments"]) == 1  # no unmanaged one was made


@pytest.mark.parametrize("mode", ["singleton", "context", "fail"])
def test_core_v2_config_init_context_and_web_page(
    cluster_factory, tmp_path: Path, mode: str
) -> None:  # type: ignore[no-untyped-def]
    """Determined 0.38's `Config` (not the deprecated defaults/unmanaged pair), `init_context`,
    a directory as checkpoint storage, `info._trial_info` and the experiment's web page."""
    cluster = cluster_factory()
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "core_v2_config_script.py")],
        env={**cluster.env(), "CKPT_DIR": str(cluster.ckpt_dir), "MODE": mode},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    exp = only_experiment(cluster)
    d = cluster.experiment(exp["id"])
    (trial,) = d["trials"]
    assert f"experiment {exp['id']} hparams {{'lr': 0.25}}" in proc.stdout, proc.stderr
    if mode == "fail":
        assert proc.returncode == 1 and "ValueError: oops" in proc.stderr
        assert trial["state"] == "ERROR", cluster.diagnose(exp["id"])
    else:
        assert proc.returncode == 0, proc.stderr
        assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp["id"])
    assert d["experiment"]["name"] == f"config-{mode}" and d["experiment"]["labels"] == [
        "unmanaged"
    ]
    train = cluster.get(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    assert [m["steps_completed"] for m in train] == [0, 1, 2, 3]
    (ckpt,) = cluster.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert (Path(str(cluster.ckpt_dir)) / ckpt["uuid"] / "state").read_text() == "3"
    cfg = cluster.get(f"/experiments/{exp['id']}/config")["config"]
    assert cfg["checkpoint_storage"]["host_path"] == str(cluster.ckpt_dir)
    if mode == "singleton":
        assert f"web page: {cluster.url}/experiments/{exp['id']}" in proc.stdout
