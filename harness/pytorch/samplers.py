"""Determined 0.38's `pytorch.samplers` that trials import (written for detlab): shard,
skip and repeat batch samplers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch.utils.data


class DistributedBatchSampler(torch.utils.data.BatchSampler):
    """Every `num_workers`-th batch of `batch_sampler`, starting at `rank` (this worker's shard
    of the batches; unlike torch's DistributedSampler it wraps a batch sampler)."""

    def __init__(self, batch_sampler: Any, num_workers: int, rank: int) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be at least 1, not {num_workers}")
        if not 0 <= rank < num_workers:
            raise ValueError(f"rank must be in [0, {num_workers}), not {rank}")
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.rank = rank

    def __len__(self) -> int:
        full, rest = divmod(len(self.batch_sampler), self.num_workers)
        return full + int(rest > self.rank)

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.batch_sampler), self.rank, None, self.num_workers)


class SkipBatchSampler(torch.utils.data.BatchSampler):
    """`batch_sampler` without its first `skip` batches (resuming mid-epoch)."""

    def __init__(self, batch_sampler: Any, skip: int) -> None:
        if skip < 0:
            raise ValueError(f"skip must be 0 or more, not {skip}")
        self.batch_sampler = batch_sampler
        self.skip = skip

    def __len__(self) -> int:
        return max(len(self.batch_sampler) - self.skip, 0)

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.batch_sampler), self.skip, None)


class RepeatBatchSampler(torch.utils.data.BatchSampler):
    """`batch_sampler` over and over (its length is one pass)."""

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self.batch_sampler


__all__ = ["DistributedBatchSampler", "RepeatBatchSampler", "SkipBatchSampler"]
