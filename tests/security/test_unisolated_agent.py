"""An agent run by an ordinary Unix user cannot isolate trials: the master must keep other
users' trials off it, and say so in their queue reason, while its own user's trials run there
(real master, PostgreSQL, an agent running as another Unix user and a root agent)."""

from __future__ import annotations

import json
import os

from harness.cli._modeldef import build_model_def
from tests.cluster import Cluster, wait_for
from tests.fixtures.scripted_config import SCRIPTED_DIR, config_dict
from tests.security.test_hostile_trial import only_trial, user_client

PLAIN_UID = 41_237  # the ordinary Unix user the unisolated agent runs as (no passwd entry needed)


def task_of(cluster: Cluster, exp_id: int) -> dict:
    tasks = cluster.get("/tasks", type="TRIAL")["tasks"]
    trial_id = only_trial(cluster, exp_id)
    return next(t for t in tasks if t["trial_id"] == trial_id)


def test_other_users_trials_stay_off_an_agent_that_cannot_isolate(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory()
    alice, _ = user_client(cluster, "alice")
    bob, _ = user_client(cluster, "bob")
    link = {"agent_uid": PLAIN_UID, "agent_gid": PLAIN_UID, "agent_user": "alice",
            "agent_group": "alice"}  # fmt: skip
    r = cluster.request("PUT", "/users/alice/agent-user-group", json=link)
    assert r.ok, r.text

    cluster.start_agent("plain", 1, uid=PLAIN_UID)
    agent = next(a for a in cluster.get("/agents")["agents"] if a["id"] == "plain")
    assert (agent["isolation"], agent["unix_uid"]) == ("own_user", PLAIN_UID)
    assert "NOT isolated" in cluster.read_log("plain")

    # Alice's checkpoints go where her Unix user (the agent's) may write.
    alice_ckpt = cluster.tmp / "ckpt-alice"
    alice_ckpt.mkdir(mode=0o700)
    os.chown(alice_ckpt, PLAIN_UID, PLAIN_UID)

    # Bob's trial is first in the queue and waits, saying why: no agent would run it.
    b_exp = bob.create_experiment(
        json.dumps(config_dict(cluster.ckpt_dir, name="bob", batches=2)),
        build_model_def(SCRIPTED_DIR),
    )
    b_task = wait_for(
        lambda: (t := task_of(cluster, b_exp["id"]))["waiting_for"] and t,
        60,
        what="bob's trial's queue reason",
    )
    assert "no agent in resource pool 'default' runs tasks of 'bob'" in b_task["waiting_for"]
    assert f"plain (uid {PLAIN_UID})" in b_task["waiting_for"]

    # Alice's trial, behind it, runs on her agent as her (the agent's) uid and completes.
    a_exp = alice.create_experiment(
        json.dumps(config_dict(alice_ckpt, name="alice", batches=2)),
        build_model_def(SCRIPTED_DIR),
    )
    cluster.wait_experiment(a_exp["id"], {"COMPLETED"}, timeout=240)
    assert cluster.experiment(b_exp["id"])["experiment"]["state"] == "ACTIVE"
    assert task_of(cluster, b_exp["id"])["allocation"] is None, "bob's trial never started"

    # A root agent isolates: bob's trial goes there (never to "plain") and completes.
    cluster.start_agent("isolating", 1)
    cluster.wait_experiment(b_exp["id"], {"COMPLETED"}, timeout=240)
    b_logs = "\n".join(cluster.logs(only_trial(cluster, b_exp["id"])))
    assert "scheduled on agent isolating" in b_logs, b_logs[-2000:]
    assert "agent plain" not in b_logs and "cannot isolate" not in b_logs, b_logs[-2000:]
    a_logs = "\n".join(cluster.logs(only_trial(cluster, a_exp["id"])))
    assert "scheduled on agent plain" in a_logs, a_logs[-2000:]
