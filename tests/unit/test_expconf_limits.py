"""The config's bounds (issue 27): every number within what the master can honour, text it can
store, documents that cannot cost it a hang, and checkpoint paths inside the storage root."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detlab.expconf import (
    ConfigError,
    limits,
    load_yaml,
    parse_experiment_config,
    validate_experiment_config,
)
from master.searcher.asha import asha_layout
from master.searcher.hparams import float_points, grid_point, grid_size, int_points
from tests.unit.test_expconf import base, searcher

BIG = 2**63 - 1


def _deep(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


def error(raw: Any, defaults: dict | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate_experiment_config(raw, defaults)
    return info.value


BAD = [
    ("name-1mb", base(name="n" * (1 << 20)), "name", "characters"),
    ("name-over-column", base(name="n" * 513), "name", "at most 512"),
    ("name-nul", base(name="a\x00b"), "name", "NUL"),
    ("description-surrogate", base(description="a\ud800"), "description", "surrogate"),
    ("hparam-key-nul", base(hyperparameters={"l\x00r": 1}), "hyperparameters.l\ufffdr", "key"),
    ("data-deep", base(data=_deep(40)), "data" + "[0]" * 31, "nested deeper"),
    (
        "max-length-1e30",
        base(searcher=searcher(max_length={"batches": 10**30})),
        "searcher.max_length.batches",
        "at most",
    ),
    ("max-length-2^63", base(searcher=searcher(max_length=BIG)), "searcher.max_length", "at most"),
    (
        "max-time-2^63",
        base(
            searcher=searcher(
                name="adaptive_asha", max_length=None, time_metric="t", max_time=BIG, max_trials=4
            )
        ),
        "searcher.max_time",
        "at most",
    ),
    (
        "epochs-times-records",
        base(records_per_epoch=2**40, searcher=searcher(max_length={"epochs": 2**20})),
        "searcher.max_length.epochs",
        "exceed",
    ),
    (
        "max-trials-2^40",
        base(searcher=searcher(name="random", max_trials=2**40)),
        "searcher.max_trials",
        "at most",
    ),
    (
        "slots-10^6",
        base(resources={"slots_per_trial": 10**6}),
        "resources.slots_per_trial",
        "at most 4,096",
    ),
    ("max-restarts-10^18", base(max_restarts=10**18), "max_restarts", "at most 10,000"),
    ("weight-inf", base(resources={"weight": float("inf")}), "resources.weight", "number"),
    ("weight-huge", base(resources={"weight": 1e300}), "resources.weight", "at most"),
    (
        "divisor-huge",
        base(searcher=searcher(name="adaptive_asha", max_trials=4, divisor=1e9)),
        "searcher.divisor",
        "at most",
    ),
    (
        "max-rungs-huge",
        base(searcher=searcher(name="adaptive_asha", max_trials=4, max_rungs=10**9)),
        "searcher.max_rungs",
        "at most 64",
    ),
    (
        "bracket-rungs-huge",
        base(searcher=searcher(name="adaptive_asha", max_trials=4, bracket_rungs=[10**9])),
        "searcher.bracket_rungs[0]",
        "at most 64",
    ),
    (
        "int-hparam-2^64",
        base(hyperparameters={"n": {"type": "int", "minval": 0, "maxval": 2**64}}),
        "hyperparameters.n.maxval",
        "at most",
    ),
    (
        "double-span-inf",
        base(hyperparameters={"d": {"type": "double", "minval": -1e308, "maxval": 1e308}}),
        "hyperparameters.d.maxval",
        "finite",
    ),
    (
        "log-overflow",
        base(hyperparameters={"l": {"type": "log", "minval": 0, "maxval": 400}}),
        "hyperparameters.l.maxval",
        "finite",
    ),
    (
        "grid-count-huge",
        base(hyperparameters={"d": {"type": "double", "minval": 0, "maxval": 1, "count": 2**40}}),
        "hyperparameters.d.count",
        "at most",
    ),
    ("label-long", base(labels=["x" * 256]), "labels[0]", "at most 255"),
    (
        "save-best-huge",
        base(checkpoint_storage={"host_path": "/c", "save_trial_best": 10**12}),
        "checkpoint_storage.save_trial_best",
        "at most",
    ),
    (
        "storage-path-absolute-escape",
        base(checkpoint_storage={"host_path": "/srv/ckpt", "storage_path": "/../../etc"}),
        "checkpoint_storage.storage_path",
        "'..'",
    ),
    (
        "storage-path-relative-escape",
        base(checkpoint_storage={"host_path": "/srv/ckpt", "storage_path": "a/../../etc"}),
        "checkpoint_storage.storage_path",
        "'..'",
    ),
    (
        "storage-path-outside",
        base(checkpoint_storage={"host_path": "/srv/ckpt", "storage_path": "/etc"}),
        "checkpoint_storage.storage_path",
        "inside host_path",
    ),
    (
        "storage-path-prefix-sibling",
        base(checkpoint_storage={"host_path": "/srv/ckpt", "storage_path": "/srv/ckpt-other"}),
        "checkpoint_storage.storage_path",
        "inside host_path",
    ),
    (
        "host-path-dotdot",
        base(checkpoint_storage={"host_path": "/srv/../etc"}),
        "checkpoint_storage.host_path",
        "'..'",
    ),
]


@pytest.mark.parametrize(("raw", "path", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_out_of_bounds_configs_name_the_field(raw: Any, path: str, fragment: str) -> None:
    err = error(raw)
    assert err.path == path, str(err)
    assert fragment in err.message, str(err)
    assert len(str(err)) < 500, "the message never echoes a huge value"


def test_yaml_aliases_cannot_expand_into_a_hang() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    t0 = time.monotonic()
    # Refused while parsing, before PyYAML builds the 10**8 values the aliases name.
    with pytest.raises(ConfigError, match="more than 100,000 values"):
        load_yaml("\n".join(lines) + "\ndata: {all: *a8}\n")
    assert time.monotonic() - t0 < 5


def test_deep_yaml_is_refused_before_it_is_built() -> None:
    for levels in (33, 300, 1000, 5000):
        with pytest.raises(ConfigError) as e:
            load_yaml("data: " + "{a: " * levels + "1" + "}" * levels)
        assert e.value.message == "nested deeper than 32 levels"
        assert e.value.path == "data" + ".a" * 31
    with pytest.raises(ConfigError, match="after expanding YAML aliases"):
        load_yaml("x: &x " + "[" * 20 + "]" * 20 + "\ny: " + "[" * 20 + "*x" + "]" * 20)
    assert load_yaml("data: " + "{a: " * 31 + "1" + "}" * 31)["data"]["a"]


def test_the_value_bound_counts_every_alias_it_expands() -> None:
    ten = "[" + ", ".join(["1"] * 1000) + "]"
    under = "a: &a " + ten + "\n" + "".join(f"b{i}: *a\n" for i in range(98))
    assert len(load_yaml(under)) == 99
    with pytest.raises(ConfigError, match="more than 100,000 values"):
        load_yaml(under + "".join(f"c{i}: *a\n" for i in range(5)))


def test_storage_path_inside_the_root_is_kept_relative() -> None:
    for given_path, kept in (("sub/dir", "sub/dir"), ("/srv/ckpt/sub", "sub"), ("./a//b", "a/b")):
        cs = validate_experiment_config(
            base(checkpoint_storage={"host_path": "/srv/ckpt", "storage_path": given_path})
        )["checkpoint_storage"]
        assert cs["storage_path"] == kept


def test_the_bounds_themselves_are_accepted() -> None:
    raw = base(
        name="n" * limits.MAX_NAME,
        max_restarts=limits.MAX_RESTARTS,
        resources={"slots_per_trial": limits.MAX_SLOTS_PER_TRIAL, "weight": limits.MAX_WEIGHT},
        searcher=searcher(max_length={"batches": limits.MAX_LENGTH}),
    )
    config = validate_experiment_config(raw)
    assert config["searcher"]["max_length"] == {"batches": limits.MAX_LENGTH}


# -- lazy grids ------------------------------------------------------------------------------


def _space(raw: dict[str, Any]) -> dict[str, Any]:
    return validate_experiment_config(base(hyperparameters=raw))["hyperparameters"]


def _old_axis(hp: dict[str, Any]) -> list[Any]:
    """The axis as the grid searcher built it before issue 27 (whole lists)."""
    if hp["type"] == "const":
        return [hp["val"]]
    if hp["type"] == "categorical":
        return hp["vals"]
    if hp["type"] == "int":
        return int_points(hp["minval"], hp["maxval"], hp["count"])
    points = float_points(hp["minval"], hp["maxval"], hp["count"])
    return [hp.get("base", 10.0) ** x for x in points] if hp["type"] == "log" else points


@settings(max_examples=150, deadline=None)
@given(
    lo=st.integers(-20, 20),
    width=st.integers(0, 12),
    icount=st.integers(1, 16),
    dcount=st.integers(1, 5),
    cats=st.lists(st.integers(), min_size=1, max_size=3),
)
def test_property_lazy_grid_points_match_the_materialised_product(
    lo: int, width: int, icount: int, dcount: int, cats: list[int]
) -> None:
    space = _space(
        {
            "i": {"type": "int", "minval": lo, "maxval": lo + width, "count": icount},
            "d": {"type": "double", "minval": -1.0, "maxval": 2.0, "count": dcount},
            "c": {"type": "categorical", "vals": cats},
            "k": 7,
        }
    )
    names = sorted(space)
    product = [
        dict(zip(names, combo, strict=True))
        for combo in itertools.product(*(_old_axis(space[n]) for n in names))
    ]
    assert grid_size(space) == len(product)
    assert [grid_point(space, i) for i in range(len(product))] == product


def test_a_billion_point_grid_is_sized_and_indexed_without_building_it() -> None:
    space = _space(
        {
            "a": {"type": "int", "minval": 0, "maxval": 100_000, "count": 1000},
            "b": {"type": "double", "minval": 0, "maxval": 1, "count": 1000},
            "g": {"c": {"type": "log", "minval": -5, "maxval": 0, "count": 1000}},
        }
    )
    t0 = time.monotonic()
    assert grid_size(space) == 10**9
    last = grid_point(space, 10**9 - 1)
    assert last["a"] == 100_000 and last["b"] == 1.0 and last["g"]["c"] == pytest.approx(1.0)
    assert grid_point(space, 0) == {"a": 0, "b": 0.0, "g": {"c": pytest.approx(1e-5)}}
    assert time.monotonic() - t0 < 1


def test_asha_layout_with_a_divisor_just_above_one_does_not_hang() -> None:
    config = parse_experiment_config(
        base(
            searcher=searcher(
                name="adaptive_asha",
                max_trials=16,
                divisor=1 + 1e-12,
                max_rungs=5,
                max_length={"batches": limits.MAX_LENGTH},
            )
        )
    )
    t0 = time.monotonic()
    brackets = asha_layout(config)
    assert brackets and max(b.num_rungs for b in brackets) <= 5
    assert time.monotonic() - t0 < 2
