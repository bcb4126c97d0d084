"""The experiment-config schema: defaults, normalisation, and every rule with its error path."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detlab.expconf import (
    ConfigError,
    length_unit,
    load_yaml,
    max_length_value,
    validate_experiment_config,
)
from detlab.expconf._schema import TOP_LEVEL_KEYS


def base(**overrides: Any) -> dict[str, Any]:
    """A minimal valid config, with top-level overrides (None removes a key)."""
    raw: dict[str, Any] = {
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
    }
    for key, value in overrides.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def searcher(**fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "single", "metric": "loss", "max_length": {"batches": 100}}
    for key, value in fields.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def error(raw: Any, defaults: dict | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate_experiment_config(raw, defaults)
    return info.value


def expect(raw: Any, path: str, fragment: str, defaults: dict | None = None) -> ConfigError:
    err = error(raw, defaults)
    assert err.path == path, str(err)
    assert fragment in err.message, str(err)
    return err


# -- ConfigError and YAML -------------------------------------------------------------------


def test_config_error_str_and_fields() -> None:
    err = ConfigError("searcher.max_length", "required")
    assert (err.path, err.message) == ("searcher.max_length", "required")
    assert str(err) == "searcher.max_length: required"
    assert isinstance(err, ValueError)


def test_config_error_document_level() -> None:
    err = ConfigError("the config is empty")
    assert (err.path, err.message, str(err)) == ("", "the config is empty", "the config is empty")


def test_config_error_pickles() -> None:
    err = pickle.loads(pickle.dumps(ConfigError("a.b", "bad")))
    assert (err.path, err.message) == ("a.b", "bad")


def test_load_yaml_parses() -> None:
    assert load_yaml("a: 1\nb: [x, y]\n") == {"a": 1, "b": ["x", "y"]}


def test_load_yaml_syntax_error_names_line_and_column() -> None:
    with pytest.raises(ConfigError) as info:
        load_yaml("name: ok\nsearcher: {name: single\nfoo: bar\n")
    assert info.value.path == ""
    assert "line" in str(info.value) and "column" in str(info.value)


def test_load_yaml_rejects_tabs_with_position() -> None:
    with pytest.raises(ConfigError, match=r"line 2"):
        load_yaml("a:\n\tb: 1\n")


def test_load_yaml_rejects_duplicate_keys() -> None:
    with pytest.raises(ConfigError, match=r"duplicate key 'name' \(line 3"):
        load_yaml("name: a\nentrypoint: x\nname: b\n")


def test_load_yaml_is_safe() -> None:
    with pytest.raises(ConfigError):
        load_yaml("!!python/object/apply:os.system ['true']")


# -- document level -------------------------------------------------------------------------


def test_empty_document() -> None:
    assert error(None).path == ""
    assert "empty" in error(load_yaml("")).message


def test_top_level_must_be_mapping() -> None:
    err = expect([1, 2], "", "expected a mapping at the top level")
    assert str(err) == "expected a mapping at the top level, got a list"


def test_unknown_top_level_key_with_suggestion() -> None:
    err = expect(base(hyperparameter={}), "hyperparameter", "did you mean hyperparameters?")
    assert str(err) == "hyperparameter: unknown key; did you mean hyperparameters?"


def test_unknown_key_without_close_match_lists_valid_keys() -> None:
    expect(base(zzz=1), "zzz", "valid keys: name,")


def test_unknown_searcher_key_suggestion() -> None:
    err = expect(base(searcher=searcher(maxlength=5)), "searcher.maxlength", "")
    assert str(err) == "searcher.maxlength: unknown key; did you mean max_length?"


def test_result_is_json_serialisable_and_independent_of_input() -> None:
    raw = base(data={"x": [1, 2]}, hyperparameters={"c": [1, 2]})
    before = copy.deepcopy(raw)
    config = validate_experiment_config(raw)
    json.dumps(config)
    assert raw == before
    config["data"]["x"].append(3)
    assert raw["data"]["x"] == [1, 2]


# -- defaults -------------------------------------------------------------------------------


def test_defaults_filled() -> None:
    c = validate_experiment_config(base())
    assert c["name"] == "Experiment"
    assert c["description"] == ""
    assert c["hyperparameters"] == {}
    assert c["searcher"] == {
        "name": "single",
        "metric": "loss",
        "smaller_is_better": True,
        "max_length": {"batches": 100},
        "max_trials": 1,
        "max_concurrent_trials": 1,
        "mode": "standard",
        "divisor": 4.0,
        "max_rungs": 5,
        "sampler": "random",
        "bracket_rungs": None,
        "stop_once": False,
        "time_metric": None,
        "max_time": None,
        "source_trial_id": None,
        "source_checkpoint_uuid": None,
    }
    assert c["resources"] == {
        "slots_per_trial": 1,
        "resource_pool": "default",
        "priority": 42,
        "weight": 1.0,
        "max_slots": None,
        "shm_size": None,
        "devices": [],
        "is_single_node": False,
    }
    cs = c["checkpoint_storage"]
    assert cs["type"] == "shared_fs" and cs["host_path"] is None
    assert (cs["save_experiment_best"], cs["save_trial_best"], cs["save_trial_latest"]) == (0, 1, 1)
    assert c["min_validation_period"] is None and c["min_checkpoint_period"] is None
    assert c["records_per_epoch"] is None
    assert c["max_restarts"] == 5
    env = c["environment"]
    assert env["image"] is None  # the agent picks its default image for the slot type
    assert env["environment_variables"] == {} and env["force_pull_image"] is False
    assert c["bind_mounts"] == []
    assert c["reproducibility"] == {"experiment_seed": None}
    assert c["labels"] == [] and c["data"] == {}
    assert c["workspace"] is None and c["project"] is None
    assert c["scheduling_unit"] == 100 and c["perform_initial_validation"] is False
    assert c["checkpoint_policy"] == "best"


@pytest.mark.parametrize(
    ("name", "concurrent"), [("grid", 16), ("random", 16), ("adaptive_asha", 16), ("single", 1)]
)
def test_max_concurrent_trials_default(name: str, concurrent: int) -> None:
    c = validate_experiment_config(base(searcher=searcher(name=name, max_trials=4)))
    assert c["searcher"]["max_concurrent_trials"] == concurrent


def test_grid_max_trials_defaults_to_none() -> None:
    c = validate_experiment_config(base(searcher=searcher(name="grid")))
    assert c["searcher"]["max_trials"] is None


def test_user_values_kept() -> None:
    c = validate_experiment_config(
        base(
            name="mnist",
            description="d",
            resources={"slots_per_trial": 0, "priority": 1, "weight": 2, "resource_pool": "gpu"},
            max_restarts=0,
            labels=["a", "b"],
            workspace="w",
            project="p",
            reproducibility={"experiment_seed": 7},
        )
    )
    assert (c["name"], c["description"], c["max_restarts"]) == ("mnist", "d", 0)
    assert c["resources"]["slots_per_trial"] == 0 and c["resources"]["priority"] == 1
    assert c["resources"]["weight"] == 2.0 and isinstance(c["resources"]["weight"], float)
    assert c["resources"]["resource_pool"] == "gpu"
    assert c["labels"] == ["a", "b"] and (c["workspace"], c["project"]) == ("w", "p")
    assert c["reproducibility"]["experiment_seed"] == 7


def test_null_values_mean_default() -> None:
    c = validate_experiment_config(base(description=None, resources={"priority": None}))
    assert c["resources"]["priority"] == 42


def test_validation_is_idempotent() -> None:
    raw = base(
        hyperparameters={"lr": {"type": "log", "minval": -3, "maxval": -1}, "g": {"a": 1}},
        environment={"environment_variables": ["A=1"], "image": {"cpu": "c", "cuda": "g"}},
        checkpoint_storage={"type": "s3", "bucket": "b"},
        entrypoint=["python3", "train.py", "--x", "a b"],
        bind_mounts=[{"host_path": "/data", "container_path": "/data"}],
    )
    once = validate_experiment_config(raw)
    assert validate_experiment_config(once) == once
    assert validate_experiment_config(json.loads(json.dumps(once))) == once


# -- master defaults ------------------------------------------------------------------------


def test_master_defaults_merge_under_user_values() -> None:
    defaults = {
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/srv/ckpt"},
        "resources": {"resource_pool": "pool-a", "priority": 10},
    }
    c = validate_experiment_config(base(resources={"priority": 50}), defaults)
    assert c["checkpoint_storage"]["host_path"] == "/srv/ckpt"
    assert c["resources"]["resource_pool"] == "pool-a"
    assert c["resources"]["priority"] == 50


def test_master_defaults_do_not_mutate() -> None:
    defaults = {"checkpoint_storage": {"type": "shared_fs", "host_path": "/srv/ckpt"}}
    before = copy.deepcopy(defaults)
    validate_experiment_config(base(checkpoint_storage={"save_trial_best": 3}), defaults)
    assert defaults == before


def test_user_storage_overrides_fields_of_same_type() -> None:
    defaults = {"checkpoint_storage": {"type": "shared_fs", "host_path": "/srv/ckpt"}}
    c = validate_experiment_config(
        base(checkpoint_storage={"storage_path": "sub", "save_trial_best": 2}), defaults
    )
    cs = c["checkpoint_storage"]
    assert (cs["host_path"], cs["storage_path"], cs["save_trial_best"]) == ("/srv/ckpt", "sub", 2)


def test_user_storage_of_other_type_replaces_default() -> None:
    defaults = {"checkpoint_storage": {"type": "shared_fs", "host_path": "/srv/ckpt"}}
    c = validate_experiment_config(
        base(checkpoint_storage={"type": "s3", "bucket": "bkt", "prefix": "p"}), defaults
    )
    cs = c["checkpoint_storage"]
    assert (cs["type"], cs["bucket"], cs["prefix"], cs["host_path"]) == ("s3", "bkt", "p", None)


def test_shared_fs_host_path_required_when_master_gives_none() -> None:
    expect(base(), "checkpoint_storage.host_path", "required", defaults={})


def test_shared_fs_host_path_optional_for_local_check() -> None:
    assert validate_experiment_config(base())["checkpoint_storage"]["host_path"] is None


# -- entrypoint, name -----------------------------------------------------------------------


def test_entrypoint_required() -> None:
    expect(base(entrypoint=None), "entrypoint", "required")


@pytest.mark.parametrize("bad", ["", "   ", 3, True, {"a": 1}])
def test_entrypoint_must_be_non_empty_string(bad: Any) -> None:
    assert error(base(entrypoint=bad)).path == "entrypoint"


def test_entrypoint_module_class_form() -> None:
    c = validate_experiment_config(base(entrypoint="model_def:MNistTrial"))
    assert c["entrypoint"] == "model_def:MNistTrial"


def test_entrypoint_argv_list_joined() -> None:
    c = validate_experiment_config(base(entrypoint=["python3", "train.py", "a b"]))
    assert c["entrypoint"] == "python3 train.py 'a b'"


def test_entrypoint_list_bad_item() -> None:
    expect(base(entrypoint=["python3", 3]), "entrypoint[1]", "expected a string")


def test_name_must_be_string() -> None:
    expect(base(name=5), "name", "expected a string, got 5")


# -- searcher -------------------------------------------------------------------------------


def test_searcher_required() -> None:
    expect(base(searcher=None), "searcher", "required")


def test_searcher_must_be_mapping() -> None:
    expect(base(searcher="single"), "searcher", "expected a mapping, got 'single'")


def test_searcher_name_required() -> None:
    expect(base(searcher=searcher(name=None)), "searcher.name", "required")


def test_unknown_searcher_lists_valid_names() -> None:
    err = expect(base(searcher=searcher(name="pbt")), "searcher.name", "unknown searcher 'pbt'")
    for name in ("single", "grid", "random", "adaptive_asha"):
        assert name in err.message


def test_metric_required() -> None:
    expect(base(searcher=searcher(metric=None)), "searcher.metric", "required")


def test_smaller_is_better_must_be_bool() -> None:
    expect(base(searcher=searcher(smaller_is_better="yes")), "searcher.smaller_is_better", "true")


def test_max_length_bare_int_means_batches() -> None:
    c = validate_experiment_config(base(searcher=searcher(max_length=500)))
    assert c["searcher"]["max_length"] == {"batches": 500}
    assert (length_unit(c), max_length_value(c)) == ("batches", 500)


@pytest.mark.parametrize("unit", ["batches", "records", "epochs"])
def test_max_length_units(unit: str) -> None:
    c = validate_experiment_config(
        base(searcher=searcher(max_length={unit: 3}), records_per_epoch=10)
    )
    assert (length_unit(c), max_length_value(c)) == (unit, 3)


def test_max_length_required_for_asha_only() -> None:
    asha = searcher(name="adaptive_asha", max_trials=4, max_length=None)
    expect(base(searcher=asha), "searcher.max_length", "required for adaptive_asha")


@pytest.mark.parametrize("name", ["single", "grid", "random"])
def test_max_length_optional_for_single_grid_random(name: str) -> None:
    # Determined 0.38: the script decides how long it trains; operations get a default length.
    extra = {"max_trials": 2} if name == "random" else {}
    c = validate_experiment_config(base(searcher=searcher(name=name, max_length=None, **extra)))
    assert c["searcher"]["max_length"] is None
    assert (length_unit(c), max_length_value(c)) == ("batches", 100)


@pytest.mark.parametrize(
    ("value", "path", "fragment"),
    [
        (0, "searcher.max_length", "expected an integer >= 1"),
        (-5, "searcher.max_length", "expected an integer >= 1"),
        ("100", "searcher.max_length", "a mapping like {batches: N}"),
        (True, "searcher.max_length", "got True"),
        ({"steps": 10}, "searcher.max_length.steps", "unknown length unit"),
        ({"batches": 1, "epochs": 1}, "searcher.max_length", "exactly one of"),
        ({}, "searcher.max_length", "exactly one of"),
        ({"batches": 0}, "searcher.max_length.batches", "expected an integer >= 1, got 0"),
        ({"batches": 1.5}, "searcher.max_length.batches", "got 1.5"),
        ({"batches": False}, "searcher.max_length.batches", "got False"),
    ],
)
def test_max_length_errors(value: Any, path: str, fragment: str) -> None:
    expect(base(searcher=searcher(max_length=value)), path, fragment)


def test_time_metric_and_max_time_replace_max_length() -> None:
    c = validate_experiment_config(
        base(searcher=searcher(max_length=None, time_metric="batches", max_time=1000))
    )
    assert c["searcher"]["max_length"] is None
    assert (length_unit(c), max_length_value(c)) == ("batches", 1000)


def test_time_metric_without_max_time() -> None:
    raw = base(searcher=searcher(max_length=None, time_metric="batches"))
    expect(raw, "searcher.max_time", "required together with searcher.time_metric")


def test_max_time_without_time_metric() -> None:
    raw = base(searcher=searcher(max_length=None, max_time=10))
    expect(raw, "searcher.time_metric", "required together with searcher.max_time")


def test_time_metric_with_max_length_rejected() -> None:
    raw = base(searcher=searcher(time_metric="batches", max_time=10))
    expect(raw, "searcher.max_length", "cannot be combined")


@pytest.mark.parametrize("name", ["random", "adaptive_asha"])
def test_max_trials_required(name: str) -> None:
    expect(base(searcher=searcher(name=name)), "searcher.max_trials", "required")


@pytest.mark.parametrize("bad", [0, -1, "3", 2.0, True])
def test_max_trials_type(bad: Any) -> None:
    raw = base(searcher=searcher(name="random", max_trials=bad))
    expect(raw, "searcher.max_trials", "expected an integer >= 1")


def test_single_ignores_leftover_max_trials_but_checks_type() -> None:
    raw = base(searcher=searcher(max_trials=10, max_concurrent_trials=4))
    s = validate_experiment_config(raw)["searcher"]
    assert (s["max_trials"], s["max_concurrent_trials"]) == (1, 1)
    expect(base(searcher=searcher(max_trials="x")), "searcher.max_trials", "integer")


def test_max_concurrent_trials_non_negative() -> None:
    raw = base(searcher=searcher(name="random", max_trials=3, max_concurrent_trials=-1))
    expect(raw, "searcher.max_concurrent_trials", ">= 0")


def test_adaptive_asha_fields() -> None:
    raw = base(
        searcher=searcher(
            name="adaptive_asha", max_trials=20, mode="aggressive", divisor=3, max_rungs=2
        )
    )
    s = validate_experiment_config(raw)["searcher"]
    assert (s["mode"], s["divisor"], s["max_rungs"], s["max_trials"]) == ("aggressive", 3.0, 2, 20)


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("mode", "fast", "expected one of aggressive, standard, conservative, got 'fast'"),
        ("divisor", 1, "expected a number > 1, got 1"),
        ("divisor", 0.5, "expected a number > 1"),
        ("divisor", "4", "expected a number > 1, got '4'"),
        ("max_rungs", 0, "expected an integer >= 1, got 0"),
        ("max_rungs", True, "got True"),
    ],
)
def test_adaptive_asha_errors(field: str, value: Any, fragment: str) -> None:
    raw = base(searcher=searcher(name="adaptive_asha", max_trials=4, **{field: value}))
    expect(raw, f"searcher.{field}", fragment)


def test_bracket_rungs_items() -> None:
    raw = base(searcher=searcher(name="adaptive_asha", max_trials=4, bracket_rungs=[3, 0]))
    expect(raw, "searcher.bracket_rungs[1]", ">= 1")


def test_source_trial_and_checkpoint_optional() -> None:
    raw = base(searcher=searcher(source_trial_id=3, source_checkpoint_uuid="abc"))
    s = validate_experiment_config(raw)["searcher"]
    assert (s["source_trial_id"], s["source_checkpoint_uuid"]) == (3, "abc")


def test_grid_requires_count_on_numeric_hparams() -> None:
    raw = base(
        searcher=searcher(name="grid"),
        hyperparameters={
            "a": {"type": "int", "minval": 1, "maxval": 4, "count": 2},
            "b": {"type": "categorical", "vals": [1, 2]},
            "c": 3,
            "g": {"lr": {"type": "double", "minval": 0, "maxval": 1}},
        },
    )
    expect(raw, "hyperparameters.g.lr.count", "required by the grid searcher")


def test_grid_accepts_counts() -> None:
    raw = base(
        searcher=searcher(name="grid"),
        hyperparameters={"lr": {"type": "log", "minval": -3, "maxval": -1, "count": 3}},
    )
    assert validate_experiment_config(raw)["hyperparameters"]["lr"]["count"] == 3


def test_count_not_required_for_random() -> None:
    raw = base(
        searcher=searcher(name="random", max_trials=3),
        hyperparameters={"lr": {"type": "double", "minval": 0, "maxval": 1}},
    )
    validate_experiment_config(raw)


# -- hyperparameters ------------------------------------------------------------------------


def hps(space: Any) -> dict[str, Any]:
    return validate_experiment_config(base(hyperparameters=space))["hyperparameters"]


def test_hparam_bare_values_are_const() -> None:
    assert hps({"a": 1, "b": "x", "c": [1, 2], "d": None, "e": True}) == {
        "a": {"type": "const", "val": 1},
        "b": {"type": "const", "val": "x"},
        "c": {"type": "const", "val": [1, 2]},
        "d": {"type": "const", "val": None},
        "e": {"type": "const", "val": True},
    }


def test_hparam_definitions_normalised() -> None:
    assert hps(
        {
            "k": {"type": "const", "val": {"x": 1}},
            "i": {"type": "int", "minval": 1, "maxval": 8, "count": 3},
            "d": {"type": "double", "minval": 0, "maxval": 1},
            "l": {"type": "log", "minval": -4, "maxval": -1, "base": 2},
            "l10": {"type": "log", "minval": -4, "maxval": -1},
            "c": {"type": "categorical", "vals": ["a", 1]},
        }
    ) == {
        "k": {"type": "const", "val": {"x": 1}},
        "i": {"type": "int", "minval": 1, "maxval": 8, "count": 3},
        "d": {"type": "double", "minval": 0.0, "maxval": 1.0},
        "l": {"type": "log", "minval": -4.0, "maxval": -1.0, "base": 2.0},
        "l10": {"type": "log", "minval": -4.0, "maxval": -1.0, "base": 10.0},
        "c": {"type": "categorical", "vals": ["a", 1]},
    }


def test_hparam_nested_groups() -> None:
    assert hps(
        {
            "opt": {
                "name": "adam",
                "lr": {"type": "double", "minval": 0, "maxval": 1},
                "inner": {"x": 1},
            }
        }
    ) == {
        "opt": {
            "type": "object",
            "vals": {
                "name": {"type": "const", "val": "adam"},
                "lr": {"type": "double", "minval": 0.0, "maxval": 1.0},
                "inner": {"type": "object", "vals": {"x": {"type": "const", "val": 1}}},
            },
        }
    }


def test_hparams_must_be_mapping() -> None:
    expect(base(hyperparameters=[1]), "hyperparameters", "expected a mapping")


@pytest.mark.parametrize(
    ("hp", "path", "fragment"),
    [
        ({"type": "float"}, "hyperparameters.x.type", "expected one of const, int, double"),
        ({"type": "int", "minval": 1}, "hyperparameters.x.maxval", "required"),
        ({"type": "int", "maxval": 1}, "hyperparameters.x.minval", "required"),
        ({"type": "int", "minval": 1.5, "maxval": 3}, "hyperparameters.x.minval", "integer"),
        ({"type": "int", "minval": True, "maxval": 3}, "hyperparameters.x.minval", "integer"),
        ({"type": "int", "minval": 5, "maxval": 3}, "hyperparameters.x.maxval", ">= minval"),
        ({"type": "double", "minval": 2.5, "maxval": 1}, "hyperparameters.x.maxval", ">= minval"),
        ({"type": "double", "minval": "a", "maxval": 1}, "hyperparameters.x.minval", "number"),
        (
            {"type": "double", "minval": float("nan"), "maxval": 1},
            "hyperparameters.x.minval",
            "number",
        ),
        ({"type": "log", "minval": -3, "maxval": 1, "base": 1}, "hyperparameters.x.base", "> 0"),
        ({"type": "log", "minval": -3, "maxval": 1, "base": -2}, "hyperparameters.x.base", "> 0"),
        ({"type": "int", "minval": 1, "maxval": 3, "count": 0}, "hyperparameters.x.count", ">= 1"),
        (
            {"type": "int", "minval": 1, "maxval": 3, "count": True},
            "hyperparameters.x.count",
            ">= 1",
        ),
        ({"type": "categorical", "vals": []}, "hyperparameters.x.vals", "non-empty list"),
        ({"type": "categorical"}, "hyperparameters.x.vals", "non-empty list"),
        ({"type": "categorical", "vals": "ab"}, "hyperparameters.x.vals", "non-empty list"),
        ({"type": "const"}, "hyperparameters.x.val", "required"),
        ({"type": "int", "minval": 1, "maxval": 2, "maxvla": 3}, "hyperparameters.x.maxvla", ""),
        ({"type": "const", "val": 1, "vals": [1]}, "hyperparameters.x.vals", "did you mean val?"),
    ],
)
def test_hparam_errors(hp: dict[str, Any], path: str, fragment: str) -> None:
    expect(base(hyperparameters={"x": hp}), path, fragment)


def test_hparam_error_in_nested_group_has_full_path() -> None:
    raw = base(hyperparameters={"opt": {"sched": {"gamma": {"type": "double", "minval": 1}}}})
    expect(raw, "hyperparameters.opt.sched.gamma.maxval", "required")


def test_hparam_unknown_key_suggestion() -> None:
    err = error(base(hyperparameters={"x": {"type": "int", "minval": 1, "maxvla": 2}}))
    assert str(err) == "hyperparameters.x.maxvla: unknown key; did you mean maxval?"


def test_hparam_const_must_be_json() -> None:
    import datetime

    raw = base(hyperparameters={"x": datetime.date(2020, 1, 1)})
    expect(raw, "hyperparameters.x", "expected a JSON value")


def test_hparam_equal_bounds_ok() -> None:
    assert hps({"x": {"type": "int", "minval": 3, "maxval": 3}})["x"]["minval"] == 3


# -- resources ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("slots_per_trial", "two", "expected an integer >= 0, got 'two'"),
        ("slots_per_trial", -1, "expected an integer >= 0, got -1"),
        ("slots_per_trial", True, "expected an integer >= 0, got True"),
        ("slots_per_trial", 1.0, "expected an integer >= 0, got 1.0"),
        ("priority", 0, "between 1 and 99"),
        ("priority", 100, "between 1 and 99"),
        ("weight", 0, "expected a number > 0"),
        ("weight", False, "expected a number > 0"),
        ("resource_pool", "", "must not be empty"),
        ("resource_pool", 3, "expected a string"),
        ("max_slots", -1, ">= 0"),
        ("shm_size", "lots", "size like '4G'"),
        ("shm_size", -1, ">= 0"),
        ("slot_per_trial", 1, "did you mean slots_per_trial?"),
    ],
)
def test_resources_errors(field: str, value: Any, fragment: str) -> None:
    expect(base(resources={field: value}), f"resources.{field}", fragment)


def test_slots_per_trial_message_exact() -> None:
    err = error(base(resources={"slots_per_trial": "two"}))
    assert str(err) == "resources.slots_per_trial: expected an integer >= 0, got 'two'"


def test_resources_must_be_mapping() -> None:
    expect(base(resources=4), "resources", "expected a mapping, got 4")


def test_max_slots_below_slots_per_trial() -> None:
    expect(base(resources={"slots_per_trial": 4, "max_slots": 2}), "resources.max_slots", ">=")


def test_shm_size_forms() -> None:
    assert validate_experiment_config(base(resources={"shm_size": "4G"}))["resources"]["shm_size"]
    c = validate_experiment_config(base(resources={"shm_size": 1024}))
    assert c["resources"]["shm_size"] == 1024


# -- checkpoint storage ---------------------------------------------------------------------


def test_shared_fs_storage() -> None:
    c = validate_experiment_config(
        base(checkpoint_storage={"host_path": "/ckpt", "storage_path": "x", "save_trial_best": 3})
    )
    cs = c["checkpoint_storage"]
    assert (cs["type"], cs["host_path"], cs["storage_path"], cs["save_trial_best"]) == (
        "shared_fs",
        "/ckpt",
        "x",
        3,
    )


def test_shared_fs_host_path_absolute() -> None:
    raw = base(checkpoint_storage={"type": "shared_fs", "host_path": "rel/dir"})
    expect(raw, "checkpoint_storage.host_path", "absolute path")


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_bucket_required(kind: str) -> None:
    expect(base(checkpoint_storage={"type": kind}), "checkpoint_storage.bucket", "required")


def test_s3_storage() -> None:
    cs = validate_experiment_config(
        base(
            checkpoint_storage={
                "type": "s3",
                "bucket": "b",
                "prefix": "p",
                "endpoint_url": "http://minio:9000",
                "access_key": "k",
                "secret_key": "s",
            }
        )
    )["checkpoint_storage"]
    assert (cs["bucket"], cs["prefix"], cs["endpoint_url"]) == ("b", "p", "http://minio:9000")


def test_storage_field_of_other_type() -> None:
    raw = base(checkpoint_storage={"type": "gcs", "bucket": "b", "host_path": "/x"})
    expect(raw, "checkpoint_storage.host_path", "not valid for checkpoint storage type gcs")


def test_storage_type_unknown() -> None:
    expect(base(checkpoint_storage={"type": "azure"}), "checkpoint_storage.type", "one of")


def test_storage_save_counts_non_negative() -> None:
    raw = base(checkpoint_storage={"host_path": "/c", "save_trial_latest": -1})
    expect(raw, "checkpoint_storage.save_trial_latest", ">= 0")


def test_storage_unknown_key() -> None:
    raw = base(checkpoint_storage={"host_path": "/c", "hostpath": "/d"})
    expect(raw, "checkpoint_storage.hostpath", "did you mean host_path?")


# -- lengths --------------------------------------------------------------------------------


def test_periods_normalised() -> None:
    c = validate_experiment_config(
        base(min_validation_period=50, min_checkpoint_period={"epochs": 1}, records_per_epoch=64)
    )
    assert c["min_validation_period"] == {"batches": 50}
    assert c["min_checkpoint_period"] == {"epochs": 1}


def test_period_zero_allowed() -> None:
    c = validate_experiment_config(base(min_validation_period={"batches": 0}))
    assert c["min_validation_period"] == {"batches": 0}


def test_period_errors() -> None:
    expect(base(min_validation_period={"batches": -1}), "min_validation_period.batches", ">= 0")
    expect(base(min_checkpoint_period="often"), "min_checkpoint_period", "{batches: N}")


@pytest.mark.parametrize(
    ("overrides", "where"),
    [
        ({"searcher": searcher(max_length={"epochs": 2})}, "searcher.max_length"),
        ({"min_validation_period": {"epochs": 1}}, "min_validation_period"),
        ({"min_checkpoint_period": {"epochs": 1}}, "min_checkpoint_period"),
    ],
)
def test_records_per_epoch_required_for_epochs(overrides: dict[str, Any], where: str) -> None:
    err = expect(base(**overrides), "records_per_epoch", "required")
    assert where in err.message


@pytest.mark.parametrize("bad", [0, -3, "10", 1.5, True])
def test_records_per_epoch_type(bad: Any) -> None:
    expect(base(records_per_epoch=bad), "records_per_epoch", "expected an integer >= 1")


def test_length_unit_and_value_records() -> None:
    c = validate_experiment_config(base(searcher=searcher(max_length={"records": 6400})))
    assert (length_unit(c), max_length_value(c)) == ("records", 6400)


# -- max_restarts ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, "5", True, 1.0])
def test_max_restarts_errors(bad: Any) -> None:
    expect(base(max_restarts=bad), "max_restarts", "expected an integer >= 0")


# -- environment ----------------------------------------------------------------------------


def test_env_vars_list_to_dict() -> None:
    env = validate_experiment_config(
        base(environment={"environment_variables": ["A=1", "B=x=y", "EMPTY="]})
    )["environment"]
    assert env["environment_variables"] == {"A": "1", "B": "x=y", "EMPTY": ""}


def test_env_vars_mapping() -> None:
    env = validate_experiment_config(
        base(environment={"environment_variables": {"A": 1, "B": "two", "C": True, "D": 0.5}})
    )["environment"]
    assert env["environment_variables"] == {"A": "1", "B": "two", "C": "true", "D": "0.5"}


def test_env_vars_per_device_form_merged() -> None:
    env = validate_experiment_config(
        base(environment={"environment_variables": {"cpu": ["A=1"], "cuda": ["B=2"]}})
    )["environment"]
    assert env["environment_variables"] == {"A": "1", "B": "2"}


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (["A=1", "NOEQUALS"], "environment.environment_variables[1]"),
        (["=x"], "environment.environment_variables[0]"),
        ([3], "environment.environment_variables[0]"),
        ("A=1", "environment.environment_variables"),
        ({"A": [1]}, "environment.environment_variables.A"),
        ({"A B": "1"}, "environment.environment_variables"),
    ],
)
def test_env_vars_errors(value: Any, path: str) -> None:
    assert error(base(environment={"environment_variables": value})).path == path


def test_image_forms() -> None:
    c = validate_experiment_config(base(environment={"image": "pytorch/pytorch:2.3"}))
    assert c["environment"]["image"] == "pytorch/pytorch:2.3"
    # Per device: kept whole, whatever slots_per_trial says (a CPU agent's slot takes the cpu
    # image; the agent picks by the slots it gives).
    per_device = {"image": {"cpu": "img-cpu", "cuda": "img-gpu"}}
    for slots in (0, 1, 4):
        c = validate_experiment_config(
            base(environment=per_device, resources={"slots_per_trial": slots})
        )
        assert c["environment"]["image"] == {"cpu": "img-cpu", "cuda": "img-gpu"}


def test_image_errors() -> None:
    expect(base(environment={"image": ""}), "environment.image", "must not be empty")
    expect(base(environment={"image": 3}), "environment.image", "expected a string")
    expect(base(environment={"image": {"tpu": "x"}}), "environment.image.tpu", "unknown key")
    expect(base(environment={"image": {"cpu": ""}}), "environment.image.cpu", "must not be empty")
    expect(base(environment={"image": {}}), "environment.image", "at least one of")


def test_force_pull_image() -> None:
    c = validate_experiment_config(base(environment={"force_pull_image": True}))
    assert c["environment"]["force_pull_image"] is True
    expect(base(environment={"force_pull_image": 1}), "environment.force_pull_image", "true or")


def test_environment_unknown_key() -> None:
    expect(base(environment={"imag": "x"}), "environment.imag", "did you mean image?")


# -- bind mounts ----------------------------------------------------------------------------


def test_bind_mounts() -> None:
    c = validate_experiment_config(
        base(bind_mounts=[{"host_path": "/data", "container_path": "/mnt/data", "read_only": True}])
    )
    assert c["bind_mounts"] == [
        {
            "host_path": "/data",
            "container_path": "/mnt/data",
            "read_only": True,
            "propagation": "rprivate",
        }
    ]


@pytest.mark.parametrize(
    ("mounts", "path", "fragment"),
    [
        ({"host_path": "/a"}, "bind_mounts", "expected a list"),
        (["/a:/b"], "bind_mounts[0]", "expected a mapping"),
        ([{"container_path": "/b"}], "bind_mounts[0].host_path", "required"),
        ([{"host_path": "/a"}], "bind_mounts[0].container_path", "required"),
        ([{"host_path": "rel", "container_path": "/b"}], "bind_mounts[0].host_path", "absolute"),
        (
            [{"host_path": "/a", "container_path": "/b"}, {"host_path": 1, "container_path": "/c"}],
            "bind_mounts[1].host_path",
            "expected a string",
        ),
        (
            [{"host_path": "/a", "container_path": "/b", "read_only": "no"}],
            "bind_mounts[0].read_only",
            "true or false",
        ),
        (
            [{"host_path": "/a", "container_path": "/b", "readonly": True}],
            "bind_mounts[0].readonly",
            "did you mean read_only?",
        ),
    ],
)
def test_bind_mount_errors(mounts: Any, path: str, fragment: str) -> None:
    expect(base(bind_mounts=mounts), path, fragment)


# -- the rest -------------------------------------------------------------------------------


def test_reproducibility_seed() -> None:
    raw = base(reproducibility={"experiment_seed": -1})
    expect(raw, "reproducibility.experiment_seed", "between 0 and 4294967295")
    expect(base(reproducibility={"seed": 1}), "reproducibility.seed", "experiment_seed")


def test_labels() -> None:
    expect(base(labels="a"), "labels", "expected a list of strings")
    expect(base(labels=["a", 2]), "labels[1]", "expected a string")


def test_data_passthrough() -> None:
    c = validate_experiment_config(base(data={"url": "s3://x", "nested": {"a": [1, None]}}))
    assert c["data"] == {"url": "s3://x", "nested": {"a": [1, None]}}
    expect(base(data=[1]), "data", "expected a mapping")


def test_harmless_determined_keys_pass_through() -> None:
    c = validate_experiment_config(
        base(
            profiling={"enabled": True, "begin_on_batch": 0},
            optimizations={"aggregation_frequency": 2},
            scheduling_unit=50,
            perform_initial_validation=True,
            checkpoint_policy="all",
        )
    )
    assert c["profiling"] == {"enabled": True, "begin_on_batch": 0}
    assert c["optimizations"] == {"aggregation_frequency": 2}
    assert c["scheduling_unit"] == 50 and c["perform_initial_validation"] is True
    assert c["checkpoint_policy"] == "all"


def test_determined_mnist_style_yaml() -> None:
    text = """
name: mnist_pytorch_const
data:
  url: https://example.com/mnist.tar.gz
hyperparameters:
  learning_rate: 1.0
  global_batch_size: 64
  n_filters1: 32
  dropout1: 0.25
  optimizer:
    type: categorical
    vals: [adam, sgd]
records_per_epoch: 50000
searcher:
  name: single
  metric: validation_loss
  max_length:
    epochs: 1
  smaller_is_better: true
entrypoint: model_def:MNistTrial
min_validation_period:
  batches: 100
resources:
  slots_per_trial: 2
bind_mounts:
  - host_path: /tmp
    container_path: /data
    read_only: true
environment:
  environment_variables:
    - NCCL_DEBUG=INFO
max_restarts: 0
"""
    c = validate_experiment_config(load_yaml(text))
    assert c["hyperparameters"]["learning_rate"] == {"type": "const", "val": 1.0}
    assert c["hyperparameters"]["optimizer"]["type"] == "categorical"
    assert (length_unit(c), max_length_value(c)) == ("epochs", 1)
    assert c["environment"]["environment_variables"] == {"NCCL_DEBUG": "INFO"}


def test_yaml_booleans_are_not_ints() -> None:
    raw = load_yaml("entrypoint: x\nsearcher: {name: single, metric: m, max_length: yes}\n")
    expect(raw, "searcher.max_length", "got True")


# -- properties -----------------------------------------------------------------------------

# Text a config may hold: PostgreSQL stores no NUL, UTF-8 no lone surrogate (both are refused).
_storable = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(_storable, max_size=8),
)
_names = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)


@st.composite
def _hparam(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["bare", "int", "double", "log", "categorical"]))
    if kind == "bare":
        return draw(_scalars)
    if kind == "categorical":
        return {"type": "categorical", "vals": draw(st.lists(_scalars, min_size=1, max_size=4))}
    if kind == "int":
        lo, hi = sorted(draw(st.lists(st.integers(-1000, 1000), min_size=2, max_size=2)))
        return {"type": "int", "minval": lo, "maxval": hi, "count": draw(st.integers(1, 5))}
    lo, hi = sorted(draw(st.lists(st.floats(-10, 10), min_size=2, max_size=2)))
    return {"type": kind, "minval": lo, "maxval": hi, "count": draw(st.integers(1, 5))}


_spaces = st.recursive(
    st.dictionaries(_names, _hparam(), max_size=4),
    lambda children: st.dictionaries(_names, children, min_size=1, max_size=3),
    max_leaves=8,
)


@settings(max_examples=80, deadline=None)
@given(space=_spaces, name=st.sampled_from(["single", "grid", "random", "adaptive_asha"]))
def test_property_valid_configs_expand_idempotently(space: dict[str, Any], name: str) -> None:
    raw = base(hyperparameters=space, searcher=searcher(name=name, max_trials=None))
    if name in ("random", "adaptive_asha"):
        raw["searcher"]["max_trials"] = 3
    once = validate_experiment_config(raw)
    assert json.loads(json.dumps(once)) == once
    assert validate_experiment_config(once) == once


@settings(max_examples=80, deadline=None)
@given(value=st.one_of(_scalars, st.lists(st.integers(), max_size=2)))
def test_property_slots_per_trial_accepts_only_bounded_non_negative_ints(value: Any) -> None:
    raw = base(resources={"slots_per_trial": value})
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 4096
    if ok:
        assert validate_experiment_config(raw)["resources"]["slots_per_trial"] == value
    elif value is None:
        assert validate_experiment_config(raw)["resources"]["slots_per_trial"] == 1
    else:
        assert error(raw).path == "resources.slots_per_trial"


_json = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(_storable, max_size=6), children, max_size=3),
    ),
    max_leaves=10,
)
_section_keys = st.sampled_from(
    [
        "searcher",
        "resources",
        "checkpoint_storage",
        "environment",
        "bind_mounts",
        "hyperparameters",
        "min_validation_period",
        "reproducibility",
        "entrypoint",
        "labels",
        "records_per_epoch",
    ]
)


@settings(max_examples=300, deadline=None)
@given(key=_section_keys, value=_json, defaults=st.one_of(st.none(), st.just({})))
def test_property_garbage_only_raises_config_error(
    key: str, value: Any, defaults: dict | None
) -> None:
    raw = base(**{key: value}) if value is not None else base()
    try:
        config = validate_experiment_config(raw, defaults)
    except ConfigError as err:
        assert err.path == "" or err.path.split(".")[0].split("[")[0] in TOP_LEVEL_KEYS
    else:
        json.dumps(config)


def test_master_defaults_do_not_merge_into_hyperparameters() -> None:
    defaults = {"hyperparameters": {"x": 1}, "environment": {"environment_variables": {"A": "1"}}}
    raw = base(hyperparameters={"y": 2}, environment={"environment_variables": {"B": "2"}})
    c = validate_experiment_config(raw, {**defaults, "checkpoint_storage": {"host_path": "/c"}})
    assert c["hyperparameters"] == {"y": {"type": "const", "val": 2}}
    assert c["environment"]["environment_variables"] == {"A": "1", "B": "2"}
