"""The typed experiment config: parsed once by the schema, typed without restating a default,
stored as the schema's canonical JSON and read back typed (`Experiment.conf`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from detlab.expconf import (
    ConfigError,
    ExperimentConfig,
    Length,
    load_stored,
    load_yaml,
    parse_experiment_config,
    validate_experiment_config,
)
from master.models import Experiment

CORPUS = sorted((Path(__file__).resolve().parents[1] / "compat" / "configs").glob("*.yaml"))
RAW = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"epochs": 2}},
    "records_per_epoch": 64,
    "bind_mounts": [{"host_path": "/data", "container_path": "/data"}],
    "labels": ["a", "b"],
}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_the_canonical_json_round_trips_exactly(path: Path) -> None:
    canonical = validate_experiment_config(load_yaml(path.read_text()))
    conf = ExperimentConfig.from_json(canonical)
    assert conf.to_json() == canonical
    # Same keys in the same order: what the master stores and shows does not change.
    assert json.dumps(conf.to_json()) == json.dumps(canonical)
    assert load_stored(json.loads(json.dumps(canonical))) == conf


def test_fields_are_typed() -> None:
    conf = parse_experiment_config(RAW)
    assert conf.searcher.max_length == Length("epochs", 2)
    assert (conf.searcher.unit, conf.searcher.max_length_value()) == ("epochs", 2)
    assert conf.bind_mounts[0].read_only is False and conf.bind_mounts[0].propagation == "rprivate"
    assert conf.labels == ("a", "b")
    assert conf.checkpoint_storage.type == "shared_fs"
    # The schema's defaults, not the typed layer's: it has none of its own.
    assert conf.max_restarts == validate_experiment_config(RAW)["max_restarts"]


def test_it_is_frozen_and_changes_are_new_configs() -> None:
    conf = parse_experiment_config(RAW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        conf.max_restarts = 1  # type: ignore[misc]
    changed = conf.replace(resources=dataclasses.replace(conf.resources, priority=7))
    assert changed.resources.priority == 7 and conf.resources.priority != 7
    assert changed.to_json()["resources"]["priority"] == 7


def test_errors_are_the_schemas() -> None:
    bad = {**RAW, "max_restarts": -1}
    with pytest.raises(ConfigError) as typed:
        parse_experiment_config(bad)
    with pytest.raises(ConfigError) as plain:
        validate_experiment_config(bad)
    assert str(typed.value) == str(plain.value) == "max_restarts: expected an integer >= 0, got -1"


def test_a_missing_key_is_never_guessed_by_the_typed_layer() -> None:
    canonical = validate_experiment_config(RAW)
    del canonical["unmanaged"]
    with pytest.raises(KeyError):
        ExperimentConfig.from_json(canonical)
    # A config stored before the key existed: the schema expands it again with its default.
    assert load_stored(canonical).unmanaged is False


def test_the_model_reads_typed_and_writes_canonical_json() -> None:
    exp = Experiment(config=validate_experiment_config(RAW))
    first = exp.conf
    assert exp.conf is first  # built once per stored value
    exp.conf = first.replace(max_restarts=2)
    assert exp.config["max_restarts"] == 2 and exp.conf.max_restarts == 2
    exp.config = {**exp.config, "name": "renamed"}  # a new stored value is read afresh
    assert exp.conf.name == "renamed"
