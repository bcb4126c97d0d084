"""The digits experiment config the Slurm tests submit, in one place: a single-searcher trial of
so many batches, validated every so many, of so many slots in one partition; optionally the
slow variant (`slow_def:SlowDigits`, which sleeps between batches so that a test can act on
a trial mid-run; it needs `model_dir(c.tmp)` as the model definition)."""

from __future__ import annotations

from typing import Any

from tests.cluster import Cluster
from tests.integration.test_trial_api import digits_config


def slurm_trial(
    c: Cluster,
    base: str = "const.yaml",
    *,
    batches: int | None = None,
    validate_every: int | None = None,
    slots: int = 1,
    pool: str = "low",
    slow: float | None = None,
    **over: Any,
) -> str:
    """A digits config for cluster `c` (None leaves the base file's searcher, validation period
    and entrypoint); `over` sets any other top-level key, as digits_config does."""
    if batches is not None:
        over["searcher"] = {
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": batches},
        }
    if validate_every is not None:
        over["min_validation_period"] = {"batches": validate_every}
    if slow is not None:
        over["entrypoint"] = "slow_def:SlowDigits"
        over["hparams"] = {"sleep": slow, **over.get("hparams", {})}
    over["resources"] = {"slots_per_trial": slots, "resource_pool": pool}
    return digits_config(c, base, **over)
