"""End to end on a real cluster (det-master + det-agent processes) with checkpoints in a bucket:
moto's S3 server and the GCS emulator, both on loopback."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.checkpoints.conftest import bucket_keys, uuids_in
from tests.cluster import ROOT, Cluster, wait_for

pytestmark = pytest.mark.integration
DIGITS = ROOT / "examples" / "digits"
KILLED = Path(__file__).resolve().parent / "killed_upload"
MASTER_YAML = "checkpoint_gc_interval: 1\n"


def _submit(cluster: Cluster, config: dict[str, Any], model_dir: Path) -> int:
    path = cluster.tmp / f"exp-{len(list(cluster.tmp.glob('exp-*')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    out = cluster.det("experiment", "create", str(path), str(model_dir)).stdout
    m = re.search(r"Created experiment (\d+)", out)
    assert m, out
    return int(m.group(1))


def _kept_by_default_policy(cluster: Cluster, exp_id: int, larger_is_better: bool) -> set[str]:
    """Computed here from the API, independently of the master's GC: each trial's latest
    checkpoint and its best one with a validation."""
    keep: set[str] = set()
    for t in cluster.experiment(exp_id)["trials"]:
        ckpts = [
            c
            for c in cluster.get(f"/trials/{t['id']}/checkpoints")["checkpoints"]
            if c["state"] != "DELETED"
        ]
        val = {
            m["steps_completed"]: m["metrics"]["validation_accuracy"]
            for m in cluster.get(f"/trials/{t['id']}/metrics", group="validation")["metrics"]
        }
        if not ckpts:
            continue
        keep.add(max(ckpts, key=lambda c: c["reported_at"])["uuid"])
        scored = [c for c in ckpts if c["steps_completed"] in val]
        if scored:
            sign = -1 if larger_is_better else 1
            best = min(
                scored,
                key=lambda c: (sign * val[c["steps_completed"]], -c["steps_completed"]),
            )
            keep.add(best["uuid"])
    return keep


def test_digits_trial_checkpoints_pause_resume_on_another_agent_and_gc(
    cluster_factory, object_storage: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    if object_storage["type"] == "s3":
        # This machine's own credentials (boto3's default chain) for the direct download.
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "cli-key")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cli-secret")
    cluster = cluster_factory(master_yaml=MASTER_YAML)
    cluster.start_agent("agent-1", slots=1)
    config = yaml.safe_load((DIGITS / "const.yaml").read_text())
    config["checkpoint_storage"] = object_storage
    # Long enough that the pause below lands mid-training even on a fast, quiet machine (at 600
    # batches the trial sometimes finished before the pause arrived). The pause reaches the
    # trial within its preemption poll's round trip; a poll woken before the pause committed
    # used to hear it only 30 s later, and the trial (500-700 batches/s) finished first.
    config["searcher"]["max_length"] = {"batches": 2400}
    config["min_validation_period"] = {"batches": 400}
    config["min_checkpoint_period"] = {"batches": 400}
    exp_id = _submit(cluster, config, DIGITS)
    tid = cluster.experiment(exp_id)["trials"][0]["id"]
    cluster.wait_trial(tid, lambda t: t["steps_completed"] >= 150, 300, what="150 batches")

    # Pause, move to a second agent that shares no disk with the first, activate.
    cluster.det("experiment", "pause", str(exp_id))
    cluster.wait_trial(
        tid, lambda t: t["state"] == "PAUSED" and t["allocation_id"] is None, 120, what="paused"
    )
    paused_at = cluster.get(f"/trials/{tid}")["trial"]
    assert paused_at["latest_checkpoint"] in uuids_in(object_storage)
    cluster.stop_agent("agent-1")
    cluster.start_agent("agent-2", slots=1)
    cluster.det("experiment", "activate", str(exp_id))
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"}, timeout=400)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    logs = "\n".join(cluster.logs(tid))
    m = re.search(r"resumed from checkpoint (\S+) at batch (\d+)", logs)
    assert m and m.group(1) == paused_at["latest_checkpoint"], logs[-3000:]
    assert int(m.group(2)) == paused_at["steps_completed"]
    assert "agent-2" in cluster.read_log("agent-2") and not (cluster.tmp / "checkpoints").exists()

    # GC: while and after training, the bucket ends with exactly what the policy keeps.
    expected = _kept_by_default_policy(cluster, exp_id, larger_is_better=True)
    try:
        wait_for(lambda: uuids_in(object_storage) == expected, 60, 0.5, what="GC to settle")
    except TimeoutError:
        listed = cluster.get(f"/trials/{tid}/checkpoints")["checkpoints"]
        raise AssertionError(
            f"GC did not settle in 60 s: the bucket holds {sorted(uuids_in(object_storage))}, "
            f"the policy keeps {sorted(expected)}; checkpoints: "
            f"{[(c['uuid'], c['state'], c['steps_completed']) for c in listed]}"
        ) from None
    ckpts = cluster.det_json("checkpoint", "list", "--experiment", str(exp_id))
    live = {c["uuid"] for c in ckpts if c["state"] == "ACTIVE"}
    assert live == expected and len(ckpts) >= 6
    assert {c["state"] for c in ckpts} <= {"ACTIVE", "DELETED"}
    # Registered sizes match the objects in the bucket.
    keys = bucket_keys(object_storage)
    for c in ckpts:
        if c["uuid"] in expected:
            for rel, size in c["resources"].items():
                assert keys[f"exp/{c['uuid']}/{rel}"] == size

    # `det checkpoint download` straight from the bucket, and the same through the master.
    best = sorted(expected)[0]
    direct = cluster.tmp / "direct"
    out = cluster.det("checkpoint", "download", best, "-o", str(direct)).stdout
    assert f"from {'s3' if object_storage['type'] == 's3' else 'gs'}://" in out, out
    assert {"state.pt", "metadata.json", "load_data.json"} <= {p.name for p in direct.iterdir()}
    via = cluster.tmp / "via-master"
    cluster.det("checkpoint", "download", best, "-o", str(via), "--via-master")
    assert sorted(p.name for p in via.iterdir()) == sorted(p.name for p in direct.iterdir())
    # Secrets: never in describe output or logs.
    secret = object_storage.get("secret_key")
    if secret:
        described = cluster.det("experiment", "describe", str(exp_id), "--json").stdout
        assert secret not in described and secret not in cluster.read_log("master")
        assert secret not in cluster.read_log("agent-2") and secret not in logs


def test_asha_leaves_exactly_the_kept_checkpoints(cluster_factory, s3_storage) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(master_yaml=MASTER_YAML)
    cluster.start_agent("agent-1", slots=2)
    config = yaml.safe_load((DIGITS / "adaptive.yaml").read_text())
    config["checkpoint_storage"] = s3_storage
    config["searcher"].update(
        max_length={"batches": 200},
        max_trials=4,
        max_concurrent_trials=2,
        divisor=2,
        max_rungs=2,
        sampler="random",
    )
    exp_id = _submit(cluster, config, DIGITS)
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"}, timeout=600)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    expected = _kept_by_default_policy(cluster, exp_id, larger_is_better=True)
    wait_for(lambda: uuids_in(s3_storage) == expected, 60, 0.5, what="GC to settle")
    all_ckpts = cluster.det_json("checkpoint", "list", "--experiment", str(exp_id))
    assert len(all_ckpts) > len(expected) >= len(d["trials"])  # something was collected
    # Count objects: every kept checkpoint has its files and its metadata.json, nothing else.
    keys = bucket_keys(s3_storage)
    want = {
        f"exp/{c['uuid']}/{rel}"
        for c in all_ckpts
        if c["uuid"] in expected
        for rel in c["resources"]
    }
    # The trials' TensorBoard events (Determined's AUTO mode) live beside the checkpoints, under
    # tensorboard/ (harness/core/_tensorboard.py): not checkpoints, never collected by their GC.
    tb = {k for k in keys if k.startswith("exp/tensorboard/")}
    assert {k.split("/")[3] for k in tb} == {str(exp_id)}, tb
    assert set(keys) - tb == want


def test_killed_upload_registers_nothing(cluster_factory, object_storage) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=1)
    config = {
        "name": "killed-upload",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
        "checkpoint_storage": object_storage,
        "max_restarts": 0,
    }
    exp_id = _submit(cluster, config, KILLED)
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"}, timeout=300)
    assert d["experiment"]["state"] == "ERROR"
    tid = d["trials"][0]["id"]
    logs = "\n".join(cluster.logs(tid))
    assert "KILLED UPLOAD of 4 files after 1" in logs, logs[-2000:]
    killed = re.search(r"writing (\S+)", logs).group(1)  # type: ignore[union-attr]
    assert killed in uuids_in(object_storage)  # a partial upload is in the bucket ...
    registered = [c["uuid"] for c in cluster.get(f"/trials/{tid}/checkpoints")["checkpoints"]]
    assert len(registered) == 1 and killed not in registered  # ... and never registered
    assert cluster.get(f"/trials/{tid}")["trial"]["latest_checkpoint"] == registered[0]
    r = cluster.det("checkpoint", "describe", killed, check=False)
    assert r.returncode != 0 and "not found" in (r.stderr + r.stdout)
    assert json.dumps(d).count(killed) == 0
