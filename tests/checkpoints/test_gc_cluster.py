"""GC on a real cluster where only agents reach the storage: the master hands deletions to the
agent (poll actions), which deletes and reports; the bucket ends with what the policy keeps."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.checkpoints.conftest import uuids_in
from tests.cluster import wait_for

pytestmark = pytest.mark.integration
FEW = Path(__file__).resolve().parent / "few_ckpts"


def test_agent_deletes_when_only_agents_reach_storage(
    cluster_factory, s3_storage: dict[str, Any]
) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(
        master_yaml="checkpoint_gc_interval: 1\ncheckpoint_gc_via_agents: true\n"
    )
    cluster.start_agent("agent-1", slots=1)
    config = {
        "name": "few-ckpts",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"losses": [0.5, 0.2, 0.4, 0.3]},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 4}},
        "checkpoint_storage": s3_storage,
        "max_restarts": 0,
    }
    path = cluster.tmp / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    out = cluster.det("experiment", "create", str(path), str(FEW)).stdout
    exp_id = int(re.search(r"Created experiment (\d+)", out).group(1))  # type: ignore[union-attr]
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"}, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    ckpts = cluster.det_json("checkpoint", "list", "--experiment", str(exp_id))
    by_step = {c["steps_completed"]: c["uuid"] for c in ckpts}
    assert sorted(by_step) == [1, 2, 3, 4]
    keep = {by_step[2], by_step[4]}  # best (0.2) and latest
    wait_for(lambda: uuids_in(s3_storage) == keep, 60, 0.5, what="agent GC")
    ckpts = cluster.det_json("checkpoint", "list", "--experiment", str(exp_id))
    deleted = [c for c in ckpts if c["state"] == "DELETED"]
    assert {c["steps_completed"] for c in deleted} == {1, 3}
    assert all(c["state_reason"] == "files deleted by agent agent-1" for c in deleted)
    assert "deleted checkpoint" in cluster.read_log("agent-1")

    # The dry run of a stricter policy lists what it would free, then applying it deletes.
    out = cluster.det(
        "experiment", "set", "gc-policy", str(exp_id), "--save-trial-best", "0", "--dry-run"
    ).stdout
    assert by_step[2] in out and "1 checkpoint(s) would be deleted, freeing" in out, out
    cluster.det("experiment", "set", "gc-policy", str(exp_id), "--save-trial-best", "0", "--yes")
    wait_for(lambda: uuids_in(s3_storage) == {by_step[4]}, 60, 0.5, what="re-run GC")
    described = cluster.det("experiment", "describe", str(exp_id)).stdout
    assert "Checkpoints: 1 (" in described


def _few(cluster, storage: dict[str, Any], losses: list[float]) -> int:  # type: ignore[no-untyped-def]
    config = {
        "name": "few-ckpts",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"losses": losses},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": len(losses)}},
        "checkpoint_storage": storage,
        "max_restarts": 0,
    }
    path = cluster.tmp / f"exp-{len(losses)}.yaml"
    path.write_text(yaml.safe_dump(config))
    out = cluster.det("experiment", "create", str(path), str(FEW)).stdout
    exp_id = int(re.search(r"Created experiment (\d+)", out).group(1))  # type: ignore[union-attr]
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"}, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    return exp_id


def test_model_registry_cli_sdk_and_experiment_delete(
    cluster_factory, gcs_storage: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(master_yaml="checkpoint_gc_interval: 1\n")
    cluster.start_agent("agent-1", slots=1)
    exp_id = _few(cluster, gcs_storage, [0.3, 0.1, 0.2])
    ckpts = cluster.det_json("checkpoint", "list", "--experiment", str(exp_id))
    by_step = {c["steps_completed"]: c["uuid"] for c in ckpts}
    wait_for(lambda: uuids_in(gcs_storage) == {by_step[2], by_step[3]}, 60, 0.5, what="GC")

    cluster.det("model", "create", "digits", "--description", "small MLP", "--label", "cv")
    out = cluster.det("model", "register-version", "digits", by_step[2], "-c", "best").stdout
    assert "digits version 1" in out
    cluster.det("model", "register-version", "digits", by_step[3])
    cluster.det("model", "alias", "set", "digits", "production", "1")
    out = cluster.det("model", "alias", "set", "digits", "production", "2").stdout
    assert "(was version 1)" in out
    described = cluster.det_json("model", "describe", "digits")
    assert described["aliases"] == {"production": 2}
    assert [(h["from_version"], h["to_version"], h["username"]) for h in described["history"]] == [
        (None, 1, "admin"),
        (1, 2, "admin"),
    ]
    v1 = described["model_versions"][0]
    assert v1["checkpoint"]["lineage"]["validation_metrics"] == {"loss": 0.1}
    assert v1["checkpoint"]["lineage"]["hparams"] == {"losses": [0.3, 0.1, 0.2]}
    text = cluster.det("model", "describe", "digits").stdout
    assert "production" in text and "Alias history" in text
    listed = cluster.det("model", "list").stdout
    assert "digits" in listed and "production=2" in listed

    # `det experiment delete` asks first (no answer: nothing happens), then with --yes deletes
    # everything but the registered checkpoints.
    r = cluster.det("experiment", "delete", str(exp_id), check=False)
    assert r.returncode == 1 and "Nothing deleted" in r.stdout
    assert "3 checkpoint(s)" not in r.stdout and "Registered checkpoints are kept" in r.stdout
    out = cluster.det("experiment", "delete", str(exp_id), "--yes").stdout
    assert "2 registered checkpoint(s) kept" in out
    assert uuids_in(gcs_storage) == {by_step[2], by_step[3]}
    r = cluster.det("experiment", "describe", str(exp_id), check=False)
    assert r.returncode != 0

    # The SDK, as in Determined: get_model(name).get_version(n).checkpoint.download(path).
    monkeypatch.setenv("DET_MASTER", cluster.url)
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASSWORD", cluster.env()["DET_PASSWORD"])
    from harness import client

    client.login()
    dest = cluster.tmp / "sdk-v1"
    got = client.get_model("digits").get_version(1).checkpoint.download(str(dest))
    assert (Path(got) / "w.bin").read_bytes() == bytes([2]) * 100
    prod = client.get_model("digits").get_version("production")
    assert prod.version == 2 and prod.lineage["experiment_id"] == exp_id
    via = cluster.tmp / "via"
    prod.checkpoint.download(str(via), via_master=True)
    assert (via / "w.bin").read_bytes() == bytes([3]) * 100
    out = cluster.det("model", "download", "digits@production", "-o", str(cluster.tmp / "cli"))
    assert "version 2" in out.stdout and (cluster.tmp / "cli" / "w.bin").exists()
