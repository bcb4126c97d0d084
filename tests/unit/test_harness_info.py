"""ClusterInfo from the trial environment, and the import-time promise of `import harness`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import harness
from harness._info import get_cluster_info

ENV = {
    "DET_MASTER": "http://10.0.0.1:8080",
    "DET_SESSION_TOKEN": "tok",
    "DET_EXPERIMENT_ID": "3",
    "DET_TRIAL_ID": "17",
    "DET_ALLOCATION_ID": "alloc-1",
    "DET_TRIAL_SEED": "42",
    "DET_HPARAMS": json.dumps({"lr": 0.1, "model": {"layers": 2}}),
    "DET_LATEST_CHECKPOINT": "",
    "DET_SLOT_IDS": "[0, 1]",
    "DET_CONTAINER_ADDRS": '["10.0.0.5"]',
    "DET_TRIAL_REQUEST_ID": "req-9",
    "DET_EXPERIMENT_CONFIG": json.dumps({"name": "x", "checkpoint_storage": {"type": "shared_fs"}}),
    "DET_AGENT_ID": "box1",
}


def test_cluster_info_from_env() -> None:
    info = get_cluster_info(ENV)
    assert info is not None
    assert info.master_url == "http://10.0.0.1:8080"
    assert info.session_token == "tok"
    assert info.allocation_id == "alloc-1"
    assert info.latest_checkpoint is None  # empty means none
    assert info.container_addrs == ["10.0.0.5"]
    assert info.container_rank == 0
    assert info.slot_ids == [0, 1]
    assert info.agent_id == "box1"
    assert info.trial.trial_id == 17
    assert info.trial.experiment_id == 3
    assert info.trial.trial_seed == 42
    assert info.trial.hparams == {"lr": 0.1, "model": {"layers": 2}}
    assert info.trial.config["name"] == "x"
    assert info.trial.request_id == "req-9"


def test_latest_checkpoint_and_rank() -> None:
    env = {**ENV, "DET_LATEST_CHECKPOINT": "abc-123", "DET_CONTAINER_RANK": "2"}
    info = get_cluster_info(env)
    assert info is not None and info.latest_checkpoint == "abc-123" and info.container_rank == 2


def test_off_cluster_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("DET_MASTER", "DET_TRIAL_ID"):
        monkeypatch.delenv(k, raising=False)
    assert harness.get_cluster_info() is None
    assert get_cluster_info({"DET_MASTER": "http://x"}) is None
    assert get_cluster_info({"DET_TRIAL_ID": "1"}) is None


def test_bad_json_names_the_variable() -> None:
    with pytest.raises(RuntimeError, match="DET_HPARAMS"):
        get_cluster_info({**ENV, "DET_HPARAMS": "{nope"})


def test_public_names() -> None:
    assert issubclass(harness.InvalidHP, Exception)
    assert "%(message)s" in harness.LOG_FORMAT
    for name in (
        "init",
        "Context",
        "DistributedContext",
        "DummyDistributedContext",
        "SearcherOperation",
        "PreemptMode",
        "SearcherMode",
    ):
        assert hasattr(harness.core, name)


def test_import_is_light() -> None:
    """The harness is injected into arbitrary containers: stdlib + requests only at import."""
    code = (
        "import sys, harness, harness.core; "
        "bad = [m for m in ('torch', 'flask', 'rich', 'yaml', 'numpy', 'werkzeug') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
