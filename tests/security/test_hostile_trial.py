"""A hostile trial of user B next to user A's running trial on one agent (real master, agent and
PostgreSQL; the agent runs as root, its default): B reads every /proc/*/environ and cmdline, the
agent's data and work dirs, A's work dir and checkpoints, tries to overwrite every cached model
definition, and polls the master as an agent with whatever it found. It must get nothing, and
A's trial, paused and activated, must go on running A's code."""

from __future__ import annotations

import json
import os
from pathlib import Path

from agent.identity import DERIVED_UID_BASE
from harness.api import Client, Session
from harness.cli._modeldef import build_model_def
from tests.cluster import Cluster, call_master, wait_for
from tests.fixtures.scripted_config import SCRIPTED_DIR, config_dict

HOSTILE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"
PASSWORD = "correct horse battery staple"


def user_client(cluster: Cluster, name: str) -> tuple[Client, int]:
    r = cluster.post("/users", {"username": name, "password": PASSWORD})
    assert r.status_code == 201, r.text
    login = call_master(
        "POST",
        cluster.url + "/api/v1/auth/login",
        json={"username": name, "password": PASSWORD},
        timeout=30,
    )
    login.raise_for_status()
    return Client(Session(cluster.url, login.json()["token"])), int(r.json()["user"]["id"])


def pids_of(uid: int) -> list[int]:
    """The processes running as `uid` (read by the test, as root, from the host's /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                out.append(int(entry))
        except OSError:
            continue
    return out


def only_trial(cluster: Cluster, exp_id: int) -> int:
    trials = wait_for(lambda: cluster.get(f"/experiments/{exp_id}")["trials"], 60, what="trial")
    return int(trials[0]["id"])


def findings_of(cluster: Cluster, trial_id: int) -> dict:
    lines = [ln for ln in cluster.logs(trial_id) if ln.startswith("FINDINGS ")]
    assert lines, "\n".join(cluster.logs(trial_id)[-40:])
    return json.loads(lines[-1].removeprefix("FINDINGS "))


def run_hostile(cluster: Cluster, client: Client, targets: dict) -> dict:
    """Run tests/fixtures/hostile as `client`'s trial against `targets`; what it found."""
    config = config_dict(
        cluster.ckpt_dir,
        name="hostile",
        batches=1,
        entrypoint="python3 hostile.py",
        environment={"environment_variables": {"HOSTILE_TARGETS": json.dumps(targets)}},
    )
    exp = client.create_experiment(json.dumps(config), build_model_def(HOSTILE_DIR))
    cluster.wait_experiment(exp["id"], {"COMPLETED", "ERROR", "CANCELED"}, timeout=300)
    return findings_of(cluster, only_trial(cluster, exp["id"]))


def test_a_hostile_trial_gets_nothing_of_another_users_trial(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=2)
    alice, alice_id = user_client(cluster, "alice")
    bob, bob_id = user_client(cluster, "bob")

    # A: a long trial that checkpoints every 20 steps.
    a_config = config_dict(
        cluster.ckpt_dir,
        name="alice",
        batches=2000,
        hparams={"sleep": 0.02, "checkpoint_every": 20},
    )
    a_exp = alice.create_experiment(json.dumps(a_config), build_model_def(SCRIPTED_DIR))
    a_tid = only_trial(cluster, a_exp["id"])
    a_trial = cluster.wait_trial(
        a_tid,
        lambda t: bool(t["latest_checkpoint"]) and t["allocation_id"] is not None,
        what="alice's trial running with a checkpoint",
    )

    alice_uid = DERIVED_UID_BASE + alice_id
    assert pids_of(alice_uid), "alice's trial runs as her derived identity"
    work = cluster.tmp / "work-agent-1"
    data = cluster.tmp / "data-agent-1"
    a_ckpt = cluster.ckpt_dir / a_trial["latest_checkpoint"]
    cache = sorted(str(p) for p in (work / "cache").iterdir())
    assert cache, "the agent caches alice's model definition"
    targets = {
        "read": [
            str(work),
            str(work / a_trial["allocation_id"]),
            str(work / a_trial["allocation_id"] / "trial.py"),
            str(work / "cache"),
            *cache,
            str(data),
            str(data / "agent-agent-1.credential"),
            str(cluster.data_dir),
            str(cluster.data_dir / "agent_token"),
            str(cluster.ckpt_dir),
            str(a_ckpt),
            *(str(p) for p in a_ckpt.rglob("*") if p.is_file()),
        ],
        "overwrite": [*cache, *(str(p) for p in a_ckpt.rglob("*") if p.is_file())],
        "agent_ids": ["agent-1"],
        # Looked up by pid, not listed: the agent, the master and alice's trial process.
        "pids": [cluster.agents["agent-1"].pid, cluster.master.pid, *pids_of(alice_uid)],
    }

    # B: the hostile trial, on the same agent while A runs.
    got = run_hostile(cluster, bob, targets)

    assert got["uid"] == DERIVED_UID_BASE + bob_id, "bob's trial runs as bob's derived identity"
    # Its /proc shows its own processes alone (agent/runtime/_procfs.py): none of anyone
    # else's is listed, and those it names by pid cannot be read, not even their cmdline.
    assert got["foreign_processes_seen"] == [] and got["proc_read"] == []
    assert got["pids_probed"] >= 3 and got["paths_tried"] >= 10
    assert got["agent_calls_tried"] >= 4, "it tried at least its own token against the master"
    for kind in ("environ_read", "secrets_in_proc", "listed", "read", "overwrote"):
        assert got[kind] == [], f"bob's trial got {kind}: {got[kind]}"
    assert got["acted_as_agent"] == [], got["acted_as_agent"]
    assert got["errors"] == [], got["errors"]
    a_now = cluster.get(f"/trials/{a_tid}")["trial"]
    assert a_now["state"] == "ACTIVE" and a_now["allocation_id"], "alice's trial ran on"
    assert a_ckpt.stat().st_uid == DERIVED_UID_BASE + alice_id, "alice's checkpoint is hers"
    assert a_ckpt.stat().st_mode & 0o077 == 0, "and private"

    # A, paused and activated, runs A's code from A's checkpoint (the cache is untouched).
    cluster.det("experiment", "pause", str(a_exp["id"]))
    cluster.wait_trial(
        a_tid,
        lambda t: t["state"] == "PAUSED" and t["allocation_id"] is None,
        timeout=120,
        what="alice's trial paused",
    )
    cluster.det("experiment", "activate", str(a_exp["id"]))
    wait_for(
        lambda: any("resumed from" in ln for ln in cluster.logs(a_tid)),
        120,
        what="alice's trial resumed from its checkpoint",
    )
    logs = "\n".join(cluster.logs(a_tid))
    assert "bob's code" not in logs and "Traceback" not in logs, logs[-3000:]
    cluster.det("experiment", "kill", str(a_exp["id"]))


def test_a_trial_cannot_read_an_embedded_masters_database(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """The quick start's layout: a SQLite master and its agent on one data dir. The dir lets
    trials pass through (the default checkpoint storage is below it), so every file in it must
    be the master's alone: the database holds every user's password hash, experiments and logs."""
    cluster: Cluster = cluster_factory(db="sqlite")
    cluster.start_agent("agent-1", 1, "--data-dir", str(cluster.data_dir))
    bob, bob_id = user_client(cluster, "bob")
    data = cluster.data_dir
    db_files = [data / name for name in ("detlab.sqlite", "detlab.sqlite-wal", "detlab.sqlite-shm")]
    assert all(p.exists() for p in db_files), sorted(os.listdir(data))
    files = [p for p in data.iterdir() if p.is_file()]
    targets = {
        "read": [str(data), *(str(p) for p in files)],
        "overwrite": [str(p) for p in db_files],
        "agent_ids": ["agent-1"],
    }
    got = run_hostile(cluster, bob, targets)

    assert got["uid"] == DERIVED_UID_BASE + bob_id
    for kind in ("listed", "read", "overwrote", "acted_as_agent", "errors"):
        assert got[kind] == [], f"bob's trial got {kind}: {got[kind]}"
    for p in files:
        assert p.stat().st_mode & 0o077 == 0, f"{p.name} is the master's (or agent's) alone"
    assert cluster.get("/master")["cluster_name"] is not None, "the master still answers"
