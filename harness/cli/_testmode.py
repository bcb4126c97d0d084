"""Determined's `det experiment create --test` (pure): the small experiment it runs to check a
config and model definition: one batch of training, a validation and a checkpoint."""

from __future__ import annotations

import copy
from typing import Any


def make_test_config(config: dict[str, Any]) -> dict[str, Any]:
    """As Determined 0.38 built it: a single trial of one batch, validated after that batch,
    never restarted, its checkpoints garbage-collected when it ends."""
    test = copy.deepcopy(config)
    searcher = config.get("searcher") or {}
    test["description"] = f"[test-mode] {config.get('description') or config.get('name') or ''}"
    test["scheduling_unit"] = 1
    test["min_validation_period"] = {"batches": 1}
    test["checkpoint_storage"] = {
        **(config.get("checkpoint_storage") or {}),
        "save_experiment_best": 0,
        "save_trial_best": 0,
        "save_trial_latest": 0,
    }
    test["searcher"] = {
        "name": "single",
        "metric": searcher.get("metric", "loss"),
        "smaller_is_better": searcher.get("smaller_is_better", True),
        "max_length": {"batches": 1},
    }
    test["max_restarts"] = 0
    test.setdefault("resources", {}).setdefault("slots_per_trial", 1)
    return test


STAGES = ("Scheduling task", "Testing training", "Testing validation", "Testing checkpointing")


def stage_marks(started: bool, trained: bool, validated: bool, checkpointed: bool) -> str:
    """`Scheduling task.......... [✔], Testing training... [✗], ...` from what was seen."""
    done = (started, trained, validated, checkpointed)
    return ", ".join(
        f"{name + '.' * (25 - len(name))} [{'✔' if ok else '✗'}]"
        for name, ok in zip(STAGES, done, strict=True)
    )
