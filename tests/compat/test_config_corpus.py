"""Every key of Determined 0.38's experiment-config schema is accepted: a corpus of
Determined-style configs (tests/compat/configs/) that together set every key. Keys detlab does
not act on are named in a warning; storage types it cannot write to are refused by name."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from detlab.expconf import ConfigError, load_yaml, validate_experiment_config, warnings_for
from detlab.expconf._determined import UNHONOURED

CORPUS = Path(__file__).resolve().parent / "configs"
ACCEPTED = sorted(CORPUS.glob("*.yaml"))
REFUSED = sorted((CORPUS / "refused").glob("*.yaml"))

# Determined 0.38's experiment-config keys (sections whose values are free-form stop here).
SCHEMA_038 = {
    "bind_mounts": ["host_path", "container_path", "read_only", "propagation"],
    "checkpoint_policy": [],
    "checkpoint_storage": [
        "type", "save_experiment_best", "save_trial_best", "save_trial_latest",
        "host_path", "storage_path", "propagation", "container_path", "checkpoint_path",
        "tensorboard_path", "bucket", "prefix", "access_key", "secret_key", "endpoint_url",
    ],
    "data": [],
    "debug": [],
    "description": [],
    "entrypoint": [],
    "environment": [
        "image", "environment_variables", "proxy_ports", "ports", "registry_auth",
        "force_pull_image", "pod_spec", "add_capabilities", "drop_capabilities",
    ],
    "hyperparameters": [],
    "integrations": ["pachyderm"],
    "labels": [],
    "log_policies": ["name", "pattern", "action"],
    "max_restarts": [],
    "min_checkpoint_period": [],
    "min_validation_period": [],
    "name": [],
    "optimizations": [
        "aggregation_frequency", "average_aggregated_gradients", "average_training_metrics",
        "gradient_compression", "grad_updates_size_file", "mixed_precision",
        "tensor_fusion_threshold", "tensor_fusion_cycle_time", "auto_tune_tensor_fusion",
    ],
    "pbs": ["slots_per_node", "pbsbatch_args"],
    "preemption_timeout": [],
    "security": ["kerberos"],
    "data_layer": [],
    "internal": [],
    "perform_initial_validation": [],
    "profiling": ["enabled", "begin_on_batch", "end_after_batch", "sync_timings"],
    "project": [],
    "records_per_epoch": [],
    "reproducibility": ["experiment_seed"],
    "resources": [
        "slots_per_trial", "max_slots", "weight", "native_parallel", "shm_size",
        "resource_pool", "priority", "devices", "is_single_node", "slots", "agent_label",
    ],
    "retention_policy": ["log_retention_days"],
    "scheduling_unit": [],
    "searcher": [
        "name", "metric", "smaller_is_better", "max_length", "max_trials",
        "max_concurrent_trials", "mode", "divisor", "max_rungs", "bracket_rungs", "stop_once",
        "time_metric", "max_time", "source_trial_id", "source_checkpoint_uuid",
    ],
    "slurm": ["slots_per_node", "gpu_type", "sbatch_args"],
    "workspace": [],
}  # fmt: skip


def _paths(raw: Mapping[str, Any]) -> set[str]:
    out: set[str] = set()
    for key, value in raw.items():
        out.add(key)
        items = value if isinstance(value, list) else [value]
        for v in items:
            if isinstance(v, Mapping) and SCHEMA_038.get(key):
                out.update(f"{key}.{k}" for k in v)
    return out


def test_the_corpus_sets_every_key_of_the_schema() -> None:
    seen: set[str] = set()
    for path in ACCEPTED + REFUSED:
        seen |= _paths(load_yaml(path.read_text()))
    want = set(SCHEMA_038) | {f"{k}.{s}" for k, subs in SCHEMA_038.items() for s in subs}
    assert want - seen == set()


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: p.name)
def test_every_corpus_config_is_accepted(path: Path) -> None:
    raw = load_yaml(path.read_text())
    config = validate_experiment_config(raw)
    assert config["name"] == raw["name"]
    # Every key detlab does not act on that the config sets is named in a warning, and only those.
    named = {w.split(" ", 1)[0] for w in warnings_for(raw)}
    expected = {p for p in UNHONOURED if p in _paths(raw)}
    expected = {p for p in expected if _value(raw, p) not in (None, False, {}, [])}
    assert named == expected


def _value(raw: Mapping[str, Any], path: str) -> Any:
    section, _, key = path.partition(".")
    value = raw.get(section)
    return value.get(key) if key and isinstance(value, Mapping) else value


def test_the_corpus_warns_about_every_unhonoured_key() -> None:
    warned: set[str] = set()
    for path in ACCEPTED:
        warned |= {w.split(" ", 1)[0] for w in warnings_for(load_yaml(path.read_text()))}
    assert set(UNHONOURED) - warned == set()


@pytest.mark.parametrize("path", REFUSED, ids=lambda p: p.name)
def test_storage_detlab_cannot_write_is_refused_by_name(path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        validate_experiment_config(load_yaml(path.read_text()))
    assert info.value.path == "checkpoint_storage.type"
    assert "shared_fs, s3, gcs" in info.value.message
