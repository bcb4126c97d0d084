"""A trial whose slots span two agents, end to end: the scheduler places it across both (nothing
placed by hand), each agent starts its container, the launchers meet through the master's
rendezvous, the workers form one torch.distributed group, train and complete."""

from __future__ import annotations

import re

import pytest

from tests.cluster import Cluster
from tests.fixtures.scripted_config import make_config
from tests.integration.test_foundation import only_trial, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

LAUNCH = "python3 -m harness.launch.torch_distributed -- python3 trial.py"


def test_a_two_slot_trial_spans_two_one_slot_agents_and_completes(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch.distributed")  # a dependency: a skip fails the run anyway
    cluster: Cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=1)
    cluster.start_agent("agent-2", slots=1)
    config = make_config(
        cluster.ckpt_dir,
        name="spanning",
        batches=20,
        hparams={"checkpoint_every": 10, "log_lines": 1},
        entrypoint=LAUNCH,
        resources={"slots_per_trial": 2},
    )
    exp = submit(cluster, config)
    d = cluster.wait_experiment(exp, {"COMPLETED", "ERROR", "CANCELED"}, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp)
    trial = only_trial(cluster, exp)
    assert trial["restarts"] == 0
    logs = "\n".join(cluster.logs(trial["id"]))
    # The scheduler spread the gang over both agents, one slot each ...
    placed = re.search(r"scheduled on agents? (.*)", logs)
    assert placed and "agent-1" in placed.group(1) and "agent-2" in placed.group(1), logs[-3000:]
    # ... each agent ran one container, and both met through the master.
    assert "rendezvous: container 0 of 2" in logs and "rendezvous: container 1 of 2" in logs
    assert logs.count("log line 1 of 1") == 2, "one worker per container"
    steps = [
        m["steps_completed"]
        for m in cluster.get(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    ]
    assert steps and steps[-1] == 20 and steps == sorted(set(steps)), steps
