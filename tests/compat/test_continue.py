"""`det experiment continue ID [--config k=v]` as in Determined 0.38: the ended single-trial
experiment becomes ACTIVE again and its same trial trains on from its latest checkpoint, so a
script that checks its checkpoint's trial id (Determined's Core API tutorial) resumes."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.cluster import Cluster, wait_for
from tests.compat._util import SCRIPTS, TERMINAL, config
from tests.integration.test_foundation import submit

pytestmark = pytest.mark.integration


def test_continue_trains_the_same_trial_on_from_its_latest_checkpoint(cluster: Cluster) -> None:
    # The deprecated searcher form (searcher.max_length drives the script), as the tutorial's
    # `det e continue ID --config searcher.max_length=...` extends it.
    text = config(
        cluster,
        {"name": "single", "max_length": 6},
        {"use_ops": True, "every": 3, "sleep": 0.2},
    )
    exp_id = submit(cluster, text, SCRIPTS)
    early = cluster.det("experiment", "continue", str(exp_id), check=False)
    assert early.returncode == 1
    assert f"experiment {exp_id} is ACTIVE; only COMPLETED, CANCELED or ERROR" in early.stderr

    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    (trial,) = d["trials"]
    first_latest = trial["latest_checkpoint"]
    out = cluster.det(
        "experiment", "continue", str(exp_id), "--config", "searcher.max_length=10"
    ).stdout
    assert out.strip() == f"Continued experiment {exp_id}"
    assert cluster.experiment(exp_id)["experiment"]["state"] == "ACTIVE"

    d2 = cluster.wait_experiment(exp_id, TERMINAL, timeout=240)
    assert d2["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    (again,) = d2["trials"]
    assert again["id"] == trial["id"]  # the same trial, not a new one
    assert again["steps_completed"] == 10 and again["restarts"] == 0
    logs = "\n".join(cluster.logs(trial["id"]))
    assert f"resumed from {first_latest} at 6" in logs
    assert "not " + str(trial["id"]) not in logs  # the checkpoint was this trial's own
    ckpt = cluster.get(f"/checkpoints/{again['latest_checkpoint']}")["checkpoint"]
    assert ckpt["trial_id"] == trial["id"] and ckpt["steps_completed"] == 10
    train = cluster.get(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    assert [m["steps_completed"] for m in train] == [3, 6, 9, 10]
    config_now = cluster.get(f"/experiments/{exp_id}/config")["config"]
    assert config_now["searcher"]["max_length"] == {"batches": 10}
    states = cluster.det("experiment", "describe", str(exp_id), "--json").stdout
    assert '"COMPLETED"' in states

    # Determined 0.38.1's spelling of the override file: `--config-file FILE`.
    more = cluster.tmp / "longer.yaml"
    more.write_text("searcher:\n  max_length: 12\n")
    cluster.det("experiment", "continue", str(exp_id), "--config-file", str(more))
    d3 = cluster.wait_experiment(exp_id, TERMINAL, timeout=240)
    assert d3["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    (third,) = d3["trials"]
    assert third["id"] == trial["id"] and third["steps_completed"] == 12


def test_continue_refuses_what_it_cannot_continue(cluster: Cluster) -> None:
    text = config(
        cluster,
        {"name": "random", "max_trials": 2},
        {"max_length": 4, "sleep": 1, "lr": {"type": "double", "minval": 0.1, "maxval": 1.0}},
    )
    exp_id = submit(cluster, text, SCRIPTS)
    # Determined's rule: a grid or random search is continued as it was, without overrides.
    many = cluster.post(
        f"/experiments/{exp_id}/continue", {"override_config": "searcher:\n  max_trials: 3\n"}
    )
    assert many.status_code == 400, many.text
    assert "is a random search: it is continued as it was" in many.json()["error"]["message"]
    active = cluster.post(f"/experiments/{exp_id}/continue")
    assert active.status_code == 409 and "is ACTIVE" in active.text, active.text
    cluster.det("experiment", "kill", str(exp_id))
    asha = config(
        cluster,
        {"name": "adaptive_asha", "max_trials": 2, "max_length": 4},
        {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}},
    )
    asha_id = submit(cluster, asha, SCRIPTS)
    refused = cluster.post(f"/experiments/{asha_id}/continue")
    assert refused.status_code == 400, refused.text
    assert "adaptive_asha search with" in refused.json()["error"]["message"]
    cluster.det("experiment", "kill", str(asha_id))
    missing = cluster.det("experiment", "continue", "99999", check=False)
    assert missing.returncode == 1 and "99999" in missing.stderr
    bad = cluster.post(f"/experiments/{exp_id}/continue", {"override_config": 7})
    assert bad.status_code == 400 and "override_config" in bad.text


def test_continue_takes_up_a_random_searchs_unfinished_trials(cluster: Cluster) -> None:
    # One trial at a time: killed while the first trains, the second was never created.
    text = config(
        cluster,
        {"name": "random", "max_trials": 2, "max_concurrent_trials": 1},
        {
            "max_length": 8,
            "every": 2,
            "sleep": 0.4,
            "lr": {"type": "double", "minval": 0.1, "maxval": 1.0},
        },
    )
    exp_id = submit(cluster, text, SCRIPTS)
    first_id = cluster.experiment(exp_id)["trials"][0]["id"]
    cluster.wait_trial(
        first_id,
        lambda t: t["latest_checkpoint"] is not None or t["state"] in TERMINAL,
        timeout=240,
    )
    cluster.det("experiment", "kill", str(exp_id))
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=120)
    assert d["experiment"]["state"] == "CANCELED", cluster.diagnose(exp_id)
    (killed,) = d["trials"]
    assert killed["state"] == "CANCELED" and killed["steps_completed"] < 8, killed

    out = cluster.det("experiment", "continue", str(exp_id)).stdout
    assert out.strip() == f"Continued experiment {exp_id}"
    d2 = cluster.wait_experiment(exp_id, TERMINAL, timeout=300)
    assert d2["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    first, second = sorted(d2["trials"], key=lambda t: t["id"])
    assert first["id"] == killed["id"] and first["hparams"] == killed["hparams"]
    assert first["state"] == second["state"] == "COMPLETED"
    assert first["steps_completed"] == second["steps_completed"] == 8
    logs = "\n".join(cluster.logs(first["id"]))
    assert f"resumed from {killed['latest_checkpoint']}" in logs  # not started over

    # Every trial finished: nothing left to continue (Determined's FailedPrecondition).
    done = cluster.post(f"/experiments/{exp_id}/continue")
    assert done.status_code == 409 and "nothing to continue" in done.text, done.text


def test_continued_search_runs_its_unfinished_trials_within_max_concurrent_trials(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    # Every trial crashes once (after a checkpoint, out of restarts): the search ends ERROR
    # with three unfinished trials. Continued, they used to be reopened all at once, and with
    # free slots all three trained together though the search allows one at a time.
    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=3)
    text = config(
        cluster,
        {"name": "random", "max_trials": 3, "max_concurrent_trials": 1},
        {
            "max_length": 6,
            "every": 2,
            "sleep": 0.3,
            "fail_at": 4,
            "lr": {"type": "double", "minval": 0.1, "maxval": 1.0},
        },
        max_restarts=0,
    )
    exp_id = submit(cluster, text, SCRIPTS)
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=240)
    assert d["experiment"]["state"] == "ERROR", cluster.diagnose(exp_id)
    failed = sorted(d["trials"], key=lambda t: t["id"])
    assert [t["state"] for t in failed] == ["ERROR"] * 3, failed

    out = cluster.det("experiment", "continue", str(exp_id)).stdout
    assert out.strip() == f"Continued experiment {exp_id}"
    # Sample the trials while the continued search runs: a trial with work (ACTIVE, asked to
    # train further than it has) holds one of the search's slots; so does a live allocation
    # of a trial that still has work.
    most_with_work = most_running = 0

    def ended() -> dict | None:
        nonlocal most_with_work, most_running
        now = cluster.experiment(exp_id)
        with_work = [
            t
            for t in now["trials"]
            if t["state"] == "ACTIVE" and t["searcher_target"] > t["searcher_completed"]
        ]
        most_with_work = max(most_with_work, len(with_work))
        most_running = max(most_running, sum(1 for t in with_work if t["allocation_id"]))
        return now if now["experiment"]["state"] in TERMINAL else None

    d2 = wait_for(ended, timeout=300, interval=0.05, what=f"experiment {exp_id} to end")
    assert d2["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    assert most_with_work == 1 and most_running == 1, (most_with_work, most_running)
    again = sorted(d2["trials"], key=lambda t: t["id"])
    assert [t["id"] for t in again] == [t["id"] for t in failed]  # the same trials
    assert all(t["state"] == "COMPLETED" and t["steps_completed"] == 6 for t in again), again
    for trial in again:
        logs = "\n".join(cluster.logs(trial["id"]))
        assert "resumed from" in logs and " at 4" in logs, logs[-2000:]
    # One after another: each resumed trial started after the one before it ended.
    starts = {
        t["id"]: min(
            _when(e["timestamp"])
            for e in cluster.get(f"/trials/{t['id']}/logs", limit=10000)["logs"]
            if "resumed from" in e["line"]
        )
        for t in again
    }
    order = sorted(again, key=lambda t: starts[t["id"]])
    for before, after in zip(order, order[1:], strict=False):
        assert starts[after["id"]] >= _when(before["ended_at"]), (before, after, starts)


def _when(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))
