"""Determined's template merge rules (detlab/expconf/_merge.py): one table per rule."""

from __future__ import annotations

from typing import Any

import pytest

from detlab.expconf._merge import merge, merge_with_sources

Case = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


def check(cases: list[Case]) -> None:
    for template, config, want in cases:
        assert merge(template, config) == want, (template, config)


def test_scalars_config_wins() -> None:
    check(
        [
            ({"max_restarts": 1}, {"max_restarts": 3}, {"max_restarts": 3}),
            ({"max_restarts": 1}, {}, {"max_restarts": 1}),
            ({}, {"name": "x"}, {"name": "x"}),
            ({"name": "t"}, {"name": None}, {"name": "t"}),  # null: unset, the template's
            ({"entrypoint": "a"}, {"entrypoint": "b"}, {"entrypoint": "b"}),
        ]
    )


def test_maps_merge_recursively() -> None:
    check(
        [
            (
                {"resources": {"slots_per_trial": 2, "priority": 10}},
                {"resources": {"priority": 5}},
                {"resources": {"slots_per_trial": 2, "priority": 5}},
            ),
            (
                {"environment": {"image": "a", "force_pull_image": True}},
                {"environment": {"image": "b"}},
                {"environment": {"image": "b", "force_pull_image": True}},
            ),
            (
                {"data": {"a": {"b": 1}}},
                {"data": {"a": {"c": 2}}},
                {"data": {"a": {"b": 1, "c": 2}}},
            ),
        ]
    )


def test_lists_are_replaced() -> None:
    check(
        [
            ({"labels": ["a", "b"]}, {"labels": ["c"]}, {"labels": ["c"]}),
            ({"log_policies": [{"pattern": "x"}]}, {"log_policies": []}, {"log_policies": []}),
            (
                {"environment": {"add_capabilities": ["A"]}},
                {"environment": {"add_capabilities": ["B"]}},
                {"environment": {"add_capabilities": ["B"]}},
            ),
        ]
    )


def test_bind_mounts_and_devices_are_appended() -> None:
    a = {"host_path": "/a", "container_path": "/a"}
    b = {"host_path": "/b", "container_path": "/b"}
    check(
        [
            ({"bind_mounts": [a]}, {"bind_mounts": [b]}, {"bind_mounts": [a, b]}),
            ({"bind_mounts": [a]}, {"bind_mounts": [a, b]}, {"bind_mounts": [a, b]}),
            ({"bind_mounts": [a]}, {}, {"bind_mounts": [a]}),
            (
                {"resources": {"devices": ["/dev/x"]}},
                {"resources": {"devices": ["/dev/y"]}},
                {"resources": {"devices": ["/dev/x", "/dev/y"]}},
            ),
        ]
    )


def test_environment_variables_merge_by_name() -> None:
    check(
        [
            (
                {"environment": {"environment_variables": ["A=1", "B=2"]}},
                {"environment": {"environment_variables": ["B=3", "C=4"]}},
                {"environment": {"environment_variables": ["A=1", "B=3", "C=4"]}},
            ),
            (
                {"environment": {"environment_variables": {"A": "1"}}},
                {"environment": {"environment_variables": {"B": "2"}}},
                {"environment": {"environment_variables": {"A": "1", "B": "2"}}},
            ),
            (
                {"environment": {"environment_variables": {"cpu": ["A=1"], "cuda": ["G=1"]}}},
                {"environment": {"environment_variables": {"cpu": ["A=2", "B=1"]}}},
                {
                    "environment": {
                        "environment_variables": {"cpu": ["A=2", "B=1"], "cuda": ["G=1"]}
                    }
                },
            ),
        ]
    )


def test_checkpoint_storage_merges_only_for_the_same_type() -> None:
    s3 = {"type": "s3", "bucket": "b", "prefix": "p"}
    check(
        [
            (
                {
                    "checkpoint_storage": {
                        "type": "shared_fs",
                        "host_path": "/t",
                        "save_trial_best": 2,
                    }
                },
                {"checkpoint_storage": {"type": "shared_fs", "host_path": "/c"}},
                {
                    "checkpoint_storage": {
                        "type": "shared_fs",
                        "host_path": "/c",
                        "save_trial_best": 2,
                    }
                },
            ),
            (
                {"checkpoint_storage": {"type": "shared_fs", "host_path": "/t"}},
                {"checkpoint_storage": s3},
                {"checkpoint_storage": s3},
            ),
            (
                {"checkpoint_storage": s3},
                {"checkpoint_storage": {"save_trial_latest": 3}},
                {"checkpoint_storage": {**s3, "save_trial_latest": 3}},
            ),
        ]
    )


def test_searcher_merges_only_for_the_same_searcher() -> None:
    check(
        [
            (
                {"searcher": {"name": "single", "metric": "loss", "smaller_is_better": True}},
                {"searcher": {"name": "single", "metric": "acc", "smaller_is_better": False}},
                {"searcher": {"name": "single", "metric": "acc", "smaller_is_better": False}},
            ),
            (
                {"searcher": {"name": "adaptive_asha", "metric": "loss", "max_trials": 9}},
                {"searcher": {"name": "single", "metric": "loss"}},
                {"searcher": {"name": "single", "metric": "loss"}},
            ),
            (
                {"searcher": {"name": "random", "metric": "loss", "max_trials": 4}},
                {"searcher": {"max_trials": 8}},
                {"searcher": {"name": "random", "metric": "loss", "max_trials": 8}},
            ),
        ]
    )


def test_hyperparameters_are_replaced_one_by_one() -> None:
    check(
        [
            (
                {
                    "hyperparameters": {
                        "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10}
                    }
                },
                {"hyperparameters": {"lr": 0.1}},
                {"hyperparameters": {"lr": 0.1}},
            ),
            (
                {"hyperparameters": {"a": 1, "b": 2}},
                {"hyperparameters": {"b": {"type": "int", "minval": 1, "maxval": 3}}},
                {"hyperparameters": {"a": 1, "b": {"type": "int", "minval": 1, "maxval": 3}}},
            ),
        ]
    )


def test_sources_say_where_each_key_came_from() -> None:
    merged, sources = merge_with_sources(
        {"resources": {"slots_per_trial": 2}, "bind_mounts": [{"host_path": "/a"}]},
        {"resources": {"priority": 3}, "name": "x", "bind_mounts": [{"host_path": "/b"}]},
        "template gpu",
        "exp.yaml",
    )
    assert merged["resources"] == {"slots_per_trial": 2, "priority": 3}
    assert sources == {
        "resources.slots_per_trial": "template gpu",
        "resources.priority": "exp.yaml",
        "name": "exp.yaml",
        "bind_mounts": "template gpu + exp.yaml",
    }


@pytest.mark.parametrize("bad", [{"a": 1}, {}])
def test_merge_never_mutates_its_inputs(bad: dict[str, Any]) -> None:
    template = {"resources": {"slots_per_trial": 2}, "bind_mounts": [{"host_path": "/a"}]}
    before = repr(template), repr(bad)
    out = merge(template, bad)
    out["resources"]["slots_per_trial"] = 99
    out["bind_mounts"].append(1)
    assert (repr(template), repr(bad)) == before
