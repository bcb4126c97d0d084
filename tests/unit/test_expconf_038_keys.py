"""Keys Determined 0.38 accepts that detlab once refused (issue 40): each is accepted, named in
a warning and not stored; a wrong shape is still an error naming its path; async_halving runs
as adaptive_asha with one bracket, as 0.38 does."""

from __future__ import annotations

from typing import Any

import pytest

from detlab.expconf import (
    ConfigError,
    parse_experiment_config,
    validate_experiment_config,
    warnings_for,
)
from master.searcher.asha_layout import asha_layout


def base(**top: Any) -> dict[str, Any]:
    return {
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
        **top,
    }


@pytest.mark.parametrize(
    ("raw", "path", "gone"),
    [
        (base(preemption_timeout=120), "preemption_timeout", "preemption_timeout"),
        (
            base(security={"kerberos": {"config_file": "/etc/krb5.conf"}}),
            "security.kerberos",
            "security",
        ),
        (base(resources={"slots": 2, "slots_per_trial": 1}), "resources.slots", "slots"),
        (base(resources={"agent_label": "gpu"}), "resources.agent_label", "agent_label"),
        (base(data_layer={"type": "shared_fs"}), "data_layer", "data_layer"),
        (base(internal={"native": None}), "internal", "internal"),
    ],
)
def test_each_key_is_accepted_warned_and_not_stored(raw: dict, path: str, gone: str) -> None:
    config = validate_experiment_config(raw)
    assert gone not in config and gone not in config["resources"]
    lines = [w for w in warnings_for(raw) if w.startswith(f"{path} ")]
    assert len(lines) == 1 and "not honoured" in lines[0], warnings_for(raw)


def test_resources_slots_does_not_change_slots_per_trial() -> None:
    # Determined's template fixture sets `slots` (a command's count): an experiment keeps its own.
    config = validate_experiment_config(base(resources={"slots": 4}))
    assert config["resources"]["slots_per_trial"] == 1


@pytest.mark.parametrize(
    ("raw", "path", "fragment"),
    [
        (base(preemption_timeout="soon"), "preemption_timeout", "expected an integer >= 0"),
        (base(preemption_timeout=-1), "preemption_timeout", "expected an integer >= 0"),
        (base(security={"kerberos": "yes"}), "security.kerberos", "expected a mapping"),
        (base(security={"kerberoz": {}}), "security.kerberoz", "did you mean kerberos?"),
        (
            base(security={"kerberos": {"config_file": 3}}),
            "security.kerberos.config_file",
            "expected a string",
        ),
        (base(resources={"slots": "two"}), "resources.slots", "expected an integer >= 0"),
        (base(resources={"agent_label": 7}), "resources.agent_label", "expected a string"),
    ],
)
def test_a_wrong_shape_is_still_refused_by_path(raw: dict, path: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_experiment_config(raw)
    assert info.value.path == path, str(info.value)
    assert fragment in info.value.message, str(info.value)


def async_halving(**fields: Any) -> dict[str, Any]:
    searcher = {
        "name": "async_halving",
        "metric": "val_loss",
        "num_rungs": 3,
        "max_length": {"batches": 900},
        "max_trials": 27,
        "divisor": 3,
        **fields,
    }
    return base(
        searcher=searcher, hyperparameters={"lr": {"type": "log", "minval": -4, "maxval": -1}}
    )


def test_async_halving_runs_as_asha_with_one_bracket() -> None:
    raw = async_halving(stop_once=True, max_concurrent_trials=4, smaller_is_better=False)
    config = validate_experiment_config(raw)
    s = config["searcher"]
    assert s["name"] == "adaptive_asha"
    assert (s["bracket_rungs"], s["max_rungs"], s["divisor"]) == ([3], 3, 3.0)
    assert (s["stop_once"], s["max_concurrent_trials"], s["smaller_is_better"]) == (True, 4, False)
    # One bracket of three rungs: 27 trials at 100 batches, 9 at 300, 3 at 900.
    (bracket,) = asha_layout(parse_experiment_config(raw))
    assert (bracket.num_rungs, bracket.trials, bracket.lengths) == (3, 27, (100, 300, 900))
    (note,) = [w for w in warnings_for(raw) if w.startswith("searcher.name ")]
    assert "adaptive_asha with one bracket of 3 rungs" in note


@pytest.mark.parametrize(
    ("fields", "path", "fragment"),
    [
        ({"num_rungs": None}, "searcher.num_rungs", "required by async_halving"),
        ({"num_rungs": 0}, "searcher.num_rungs", "expected an integer >= 1"),
        ({"num_rungs": 65}, "searcher.num_rungs", "at most 64"),
        ({"mode": "standard"}, "searcher.mode", "unknown key"),
        ({"max_trials": None}, "searcher.max_trials", "required"),
    ],
)
def test_async_halving_errors_name_its_own_keys(fields: dict, path: str, fragment: str) -> None:
    raw = async_halving(**fields)
    if fields.get("num_rungs", 1) is None:
        del raw["searcher"]["num_rungs"]
    if "max_trials" in fields:
        del raw["searcher"]["max_trials"]
    with pytest.raises(ConfigError) as info:
        validate_experiment_config(raw)
    assert info.value.path == path, str(info.value)
    assert fragment in info.value.message, str(info.value)
