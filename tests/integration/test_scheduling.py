"""Scheduling end to end: competition for slots, priority preemption, queue reorder, gangs."""

from __future__ import annotations

import re

import pytest

from tests.cluster import Cluster, wait_for
from tests.fixtures.scripted_config import make_config
from tests.integration.test_foundation import only_trial, submit

pytestmark = pytest.mark.integration

PREEMPTING_POOL = """
resource_pools:
  - name: default
    scheduler: {type: priority, preemption: true}
"""


def long_job(cluster: Cluster, name: str, batches: int = 100000, **kw: object) -> str:
    return make_config(
        cluster.ckpt_dir,
        name=name,
        batches=batches,
        hparams={"sleep": 0.03, "checkpoint_every": 10, **kw.pop("hparams", {})},
        **kw,
    )


def display(cluster: Cluster, exp_id: int) -> str:
    return only_trial(cluster, exp_id)["display_state"]


def test_experiments_compete_for_two_slots(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=2)
    a = submit(cluster, long_job(cluster, "a"))
    b = submit(cluster, long_job(cluster, "b"))
    c = submit(cluster, long_job(cluster, "c", batches=20))
    wait_for(lambda: display(cluster, a) == display(cluster, b) == "RUNNING", 60, what="a and b")
    assert display(cluster, c) == "QUEUED"
    jobs = cluster.det_json("job", "list")[0]["jobs"]
    waiting = [j for j in jobs if j["experiment_id"] == c][0]
    assert waiting["state"] == "QUEUED" and waiting["jobs_ahead"] == 2
    assert waiting["reason"] == "waiting for 1 free slot(s)"
    out = cluster.det("job", "list").stdout
    assert "waiting for 1 free slot(s)" in out and "2/2 slots used" in out
    cluster.det("experiment", "kill", str(a))  # a slot frees up: c takes it
    d = cluster.wait_experiment(c, {"COMPLETED", "ERROR"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(c)
    assert display(cluster, b) == "RUNNING"
    cluster.det("experiment", "kill", str(b))


def test_high_priority_preempts_low_priority_which_resumes_intact(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(master_yaml=PREEMPTING_POOL)
    cluster.start_agent("agent-1", slots=1)
    low = submit(cluster, long_job(cluster, "low", batches=300, resources={"priority": 60}))
    low_trial = only_trial(cluster, low)["id"]
    cluster.wait_trial(low_trial, lambda t: t["steps_completed"] >= 30, what="low trains")
    high = submit(cluster, long_job(cluster, "high", batches=30, resources={"priority": 5}))
    d = cluster.wait_experiment(high, {"COMPLETED", "ERROR"}, timeout=120)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(high)
    d = cluster.wait_experiment(low, {"COMPLETED", "ERROR"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(low)
    logs = "\n".join(cluster.logs(low_trial))
    assert "preempted to make room for other work" in logs
    stopped = int(re.search(r"preempted at step (\d+)", logs).group(1))
    resumed = int(re.search(r"resumed from \S+ at step (\d+)", logs).group(1))
    assert stopped == resumed >= 30
    steps = [
        m["steps_completed"]
        for m in cluster.get(f"/trials/{low_trial}/metrics", group="training")["metrics"]
    ]
    assert steps == list(range(1, 301)), "every step trained exactly once"
    assert only_trial(cluster, low)["restarts"] == 0, "a preemption is not a failure"


def test_queue_reorder_changes_who_starts_next(cluster: Cluster) -> None:
    blocker = submit(cluster, long_job(cluster, "blocker"))
    wait_for(lambda: display(cluster, blocker) == "RUNNING", 60, what="blocker runs")
    b = submit(cluster, long_job(cluster, "b", batches=10))
    c = submit(cluster, long_job(cluster, "c", batches=10))
    out = cluster.det("job", "update", str(c), "--ahead-of", str(b)).stdout
    assert f"Updated job {c}" in out
    order = [j["experiment_id"] for j in cluster.det_json("job", "list")[0]["jobs"]]
    assert order.index(c) < order.index(b)
    cluster.det("experiment", "kill", str(blocker))
    wait_for(lambda: display(cluster, c) in ("STARTING", "RUNNING", "COMPLETED"), 60, what="c")
    assert display(cluster, b) == "QUEUED"
    assert cluster.wait_experiment(c, {"COMPLETED"})["experiment"]["state"] == "COMPLETED"
    assert cluster.wait_experiment(b, {"COMPLETED"})["experiment"]["state"] == "COMPLETED"


def test_two_slot_trial_waits_until_two_slots_are_free_at_once(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=2)
    small = submit(cluster, long_job(cluster, "small"))
    wait_for(lambda: display(cluster, small) == "RUNNING", 60, what="small runs")
    gang = submit(cluster, long_job(cluster, "gang", batches=10, resources={"slots_per_trial": 2}))
    wait_for(lambda: cluster.det_json("job", "list")[0]["jobs"][-1]["reason"], 30, what="reason")
    job = [j for j in cluster.det_json("job", "list")[0]["jobs"] if j["experiment_id"] == gang][0]
    assert job["reason"] == "waiting for 2 free slot(s)"
    assert display(cluster, gang) == "QUEUED"
    cluster.det("experiment", "kill", str(small))
    d = cluster.wait_experiment(gang, {"COMPLETED", "ERROR"})
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(gang)
    logs = "\n".join(cluster.logs(d["trials"][0]["id"]))
    assert "scheduled on agent agent-1 (slots 0, 1)" in logs


def test_request_that_can_never_fit_says_so(cluster: Cluster) -> None:
    exp = submit(cluster, long_job(cluster, "huge", resources={"slots_per_trial": 4}))
    job = wait_for(
        lambda: [
            j
            for j in cluster.det_json("job", "list")[0]["jobs"]
            if j["experiment_id"] == exp and j["reason"]
        ],
        30,
        what="reason",
    )[0]
    assert "4" in job["reason"] and "1" in job["reason"], job["reason"]
    cluster.det("experiment", "kill", str(exp))


FAIR_SHARE_PREEMPTING_POOL = """
resource_pools:
  - name: default
    scheduler: {type: fair_share, preemption: true}
"""


def training_steps(cluster: Cluster, trial_id: int) -> list[int]:
    metrics = cluster.get(f"/trials/{trial_id}/metrics", group="training")["metrics"]
    return [m["steps_completed"] for m in metrics]


def test_fair_share_preempts_the_over_share_job_which_resumes_intact(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    # Job A takes both slots; job B (same weight) arrives: A is over its share (2 of 2 against
    # 1), B under it (0), so A's newest trial is preempted for B, checkpoints, waits, and resumes
    # where it stopped once B is done. Real master, agent and trial processes.
    cluster = cluster_factory(master_yaml=FAIR_SHARE_PREEMPTING_POOL)
    cluster.start_agent("agent-1", slots=2)
    search = {"name": "random", "max_trials": 2, "max_concurrent_trials": 2}
    a = submit(cluster, long_job(cluster, "share-a", batches=300, searcher=search))
    a_trials = wait_for(
        lambda: (ts := cluster.experiment(a)["trials"]) and len(ts) == 2 and ts,
        60,
        what="A's two trials",
    )
    for t in a_trials:
        cluster.wait_trial(t["id"], lambda t: t["steps_completed"] >= 20, what="A trains")
    b = submit(cluster, long_job(cluster, "share-b", batches=30))
    # B runs while A still does: it did not wait for A to finish.
    b_trial = wait_for(
        lambda: (t := only_trial(cluster, b))["display_state"] in ("RUNNING", "COMPLETED") and t,
        120,
        what="B to get a slot",
    )
    assert cluster.experiment(a)["experiment"]["state"] not in ("COMPLETED", "ERROR")
    d = cluster.wait_experiment(b, {"COMPLETED", "ERROR"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(b)
    d = cluster.wait_experiment(a, {"COMPLETED", "ERROR"}, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(a)

    preempted = []
    for t in d["trials"]:
        logs = "\n".join(cluster.logs(t["id"]))
        assert t["state"] == "COMPLETED" and t["restarts"] == 0, t
        assert training_steps(cluster, t["id"]) == list(range(1, 301)), "each step once"
        if "preempted to make room for other work" in logs:
            stopped = int(re.search(r"preempted at step (\d+)", logs).group(1))
            resumed = int(re.search(r"resumed from \S+ at step (\d+)", logs).group(1))
            assert stopped == resumed >= 20
            preempted.append(t["id"])
    assert len(preempted) == 1, "exactly one of A's trials made room for B"
    assert preempted == [max(t["id"] for t in a_trials)], "the newest trial is the victim"
    assert b_trial["id"] not in preempted
