"""Searcher and period lengths (batches, records or epochs) in batches."""

from __future__ import annotations

import math


def to_batches(
    length: dict[str, int] | int | None,
    *,
    unit: str = "batches",
    global_batch_size: int | None,
    records_per_epoch: int | None,
) -> int | None:
    """A length (`{unit: n}` or n in `unit`) in batches; None stays None."""
    if length is None:
        return None
    if isinstance(length, dict):
        if not length:
            return None
        ((unit, n),) = length.items()
    else:
        n = int(length)
    if unit == "batches":
        return int(n)
    if global_batch_size is None:
        raise ValueError(
            f"a length in {unit} needs the hyperparameter 'global_batch_size' to become batches"
        )
    if unit == "records":
        return math.ceil(n / global_batch_size)
    if unit == "epochs":
        if not records_per_epoch:
            raise ValueError("a length in epochs needs records_per_epoch in the experiment config")
        return math.ceil(n * records_per_epoch / global_batch_size)
    raise ValueError(f"unknown length unit {unit!r} (batches, records or epochs)")
