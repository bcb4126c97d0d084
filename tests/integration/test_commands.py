"""Commands through the agent resource manager, end to end: a task that is not a trial is queued,
gang-scheduled, prioritised and preempted by the same pure scheduler, run by a real det-agent,
its output lands in the task's log and its exit code is kept (issue 43's done-when)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cluster import Cluster, wait_for
from tests.fixtures.scripted_config import make_config
from tests.integration.test_foundation import submit

pytestmark = pytest.mark.integration

PREEMPTING_POOL = """
resource_manager: {type: agent}
resource_pools:
  - name: default
    scheduler: {type: priority, preemption: true}
"""


def run(cluster: Cluster, script: str, **resources: Any) -> str:
    body = {"config": {"entrypoint": ["sh", "-c", script], "resources": resources}}
    r = cluster.post("/commands", body)
    assert r.status_code == 201, r.text
    return r.json()["command"]["id"]


def task(cluster: Cluster, task_id: str) -> dict:
    return cluster.get(f"/tasks/{task_id}")["task"]


def lines(cluster: Cluster, task_id: str) -> list[str]:
    return [log["line"] for log in cluster.get(f"/tasks/{task_id}/logs", limit=10000)["logs"]]


def running(cluster: Cluster, task_id: str) -> bool:
    alloc = task(cluster, task_id)["allocation"]
    return bool(alloc) and alloc["state"] == "RUNNING"


def ended(cluster: Cluster, task_id: str, timeout: float = 120) -> dict:
    return wait_for(
        lambda: (t := task(cluster, task_id))["state"] in ("COMPLETED", "CANCELED", "ERROR") and t,
        timeout,
        what=f"task {task_id} to end",
    )


def test_a_gang_command_waits_for_its_slots_runs_and_keeps_its_exit(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=2)
    gate = cluster.tmp / "gate"
    one = run(cluster, f"echo one-started; while [ ! -e {gate} ]; do sleep 0.1; done", slots=1)
    wait_for(lambda: running(cluster, one), 90, what="the 1-slot command to run")
    two = run(cluster, 'echo "slots=$DET_SLOT_IDS task=$DET_TASK_ID"; exit 3', slots=2)
    waiting = wait_for(lambda: task(cluster, two)["waiting_for"], 60, what="a scheduling pass")
    assert "slot" in waiting
    assert task(cluster, two)["allocation"] is None and task(cluster, two)["state"] == "ACTIVE"

    gate.touch()  # the 1-slot command ends: now both slots are free at once
    done = ended(cluster, one)
    assert (done["state"], done["exit_code"]) == ("COMPLETED", 0)
    wait_for(lambda: "one-started" in lines(cluster, one), 60, what="the first command's line")
    failed = ended(cluster, two)
    assert (failed["state"], failed["exit_code"]) == ("ERROR", 3), failed
    wait_for(lambda: f"slots=[0, 1] task={two}" in lines(cluster, two), 60, what="the gang's line")
    assert failed["allocation"]["agents"] == ["agent-1"]

    # A trial is a task too: `det task list` shows both kinds with Determined's columns.
    exp = submit(cluster, make_config(cluster.ckpt_dir, batches=2))
    cluster.wait_experiment(exp, {"COMPLETED", "ERROR"}, timeout=180)
    listed = cluster.det_json("task", "list", "--all")
    assert {t["type"] for t in listed} == {"TRIAL", "COMMAND"}
    trial_task = next(t for t in listed if t["type"] == "TRIAL")
    assert trial_task["id"].startswith(f"{exp}.") and trial_task["state"] == "COMPLETED"
    out = cluster.det("task", "list", "--all").stdout
    assert out.splitlines()[0].split()[:4] == ["Task", "ID", "Type", "State"]
    assert one in out and two in out and trial_task["id"] in out
    commands = cluster.get("/tasks", type="COMMAND")["tasks"]
    assert {t["id"] for t in commands} == {one, two}
    assert "one-started" in cluster.det("cmd", "logs", one).stdout


def test_priority_preempts_only_preemptible_commands(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(master_yaml=PREEMPTING_POOL)
    cluster.start_agent("agent-1", slots=1)
    # A command that is not preemptible keeps its slot: the higher-priority one waits.
    steady = run(cluster, "echo steady-started; exec sleep 600", priority=60)
    wait_for(lambda: running(cluster, steady), 90, what="the non-preemptible command")
    urgent = run(cluster, "echo urgent-ran", priority=5)
    wait_for(lambda: task(cluster, urgent)["waiting_for"], 60, what="a scheduling pass")
    assert running(cluster, steady)
    assert not any("preempted" in line for line in lines(cluster, steady))
    assert task(cluster, urgent)["allocation"] is None
    # `det job list` shows both commands as jobs, the waiting one first (its priority).
    [pool] = cluster.det_json("job", "list")
    assert [(j["job_id"], j["type"], j["state"]) for j in pool["jobs"]] == [
        (urgent, "COMMAND", "QUEUED"),
        (steady, "COMMAND", "SCHEDULED"),
    ]
    assert pool["jobs"][0]["reason"] and pool["jobs"][1]["slots_held"] == 1
    assert urgent in cluster.det("job", "list").stdout

    cluster.det("cmd", "kill", steady)
    killed = ended(cluster, steady)
    assert killed["state"] == "CANCELED", killed
    assert ended(cluster, urgent)["state"] == "COMPLETED"
    wait_for(lambda: "urgent-ran" in lines(cluster, urgent), 60, what="the urgent line")

    # A preemptible one is stopped for higher-priority work and queues again from the start.
    batch = run(cluster, "echo batch-started; exec sleep 600", priority=60, preemptible=True)
    wait_for(lambda: running(cluster, batch), 90, what="the preemptible command")
    first = task(cluster, batch)["allocation"]["id"]
    urgent2 = run(cluster, "echo urgent-ran-again", priority=5)
    assert ended(cluster, urgent2)["state"] == "COMPLETED"
    wait_for(
        lambda: running(cluster, batch) and task(cluster, batch)["allocation"]["id"] != first,
        90,
        what="the preempted command to run again",
    )
    # Logs ship on their own schedule: the second run's first line may land after it is RUNNING.
    log = wait_for(
        lambda: (got := lines(cluster, batch)).count("batch-started") == 2 and got,
        60,
        what="the second run's first line",
    )
    assert any("preempted to make room for other work" in line for line in log), log
    assert task(cluster, batch)["state"] == "ACTIVE"
    cluster.det("cmd", "kill", batch)
    assert ended(cluster, batch)["state"] == "CANCELED"
    listed = json.loads(cluster.det("cmd", "list", "--json").stdout)
    assert {c["id"]: c["state"] for c in listed} == {
        steady: "CANCELED",
        urgent: "COMPLETED",
        batch: "CANCELED",
        urgent2: "COMPLETED",
    }
