"""The TensorBoard layout and naming rules (pure)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.core._tensorboard import changed, default_mangler, metric_tag, scalars, sync_path


def test_sync_path_is_determineds_experiment_trial_layout() -> None:
    assert sync_path(3, 17) == "experiment/3/trial/17"


def test_metric_tags_follow_determined() -> None:
    assert metric_tag("training", "loss") == "Determined/loss"
    assert metric_tag("validation", "loss") == "Determined/val_loss"
    assert metric_tag("validation", "validation_error") == "Determined/validation_error"


def test_only_real_numbers_become_scalars() -> None:
    got = scalars({"a": 1, "b": 2.5, "c": True, "d": "x", "e": [1.0], "f": np.float32(0.5)})
    assert got == {"a": 1.0, "b": 2.5, "f": 0.5}


def test_changed_files_are_new_or_different() -> None:
    seen = {"a": (1, 10), "b": (2, 20)}
    now = {"a": (1, 10), "b": (3, 21), "c": (0, 5)}
    assert changed(now, seen) == ["b", "c"]
    assert changed(seen, seen) == []


def test_other_workers_files_never_overwrite_the_chiefs() -> None:
    p = Path("events.out.tfevents.1.host")
    assert default_mangler(p, 0) == p
    assert default_mangler(p, 2).name == "events.out.tfevents.1.host.rank2"
