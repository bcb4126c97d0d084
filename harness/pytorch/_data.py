"""Data loaders the harness can shard across workers and resume mid-epoch.

`harness.pytorch.DataLoader(dataset, batch_size=per_slot, shuffle=True, ...)` takes the arguments
of `torch.utils.data.DataLoader`. The harness turns it into a torch DataLoader whose batch sampler

- shuffles each epoch with a permutation that depends only on (trial seed, epoch),
- gives worker `rank` of `size` every `size`-th index of that permutation, so batch `j` of all
  workers together is exactly batch `j` of a single worker with the global batch size,
- starts an epoch at any batch (resume) without touching the skipped records,
- and never draws from torch's global RNG (so resuming does not shift dropout & co.).

A plain `torch.utils.data.DataLoader` with the default samplers (shuffle or not) is adopted the
same way. Anything else (a custom sampler, an `IterableDataset`) is iterated as it is: each worker
sees what it yields, and resuming mid-epoch skips batches by iterating over them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import data as tdata

_SEED_MOD = 2**63 - 1


class DataLoader:
    """Determined's `det.pytorch.DataLoader`: the arguments of `torch.utils.data.DataLoader`.

    `batch_size` is the per-slot batch size (`context.get_per_slot_batch_size()`). `sampler` and
    `batch_sampler` are not accepted: the harness does the sampling (use a torch DataLoader with
    your own sampler instead, at the cost of sharding and exact mid-epoch resume).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        **kwargs: Any,
    ) -> None:
        for bad in ("sampler", "batch_sampler", "generator"):
            if kwargs.get(bad) is not None:
                raise ValueError(
                    f"harness.pytorch.DataLoader does its own sampling: {bad}= is not supported "
                    "(return a torch.utils.data.DataLoader to use your own)"
                )
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.kwargs = kwargs

    def get_data_loader(self, *, seed: int = 0, rank: int = 0, size: int = 1) -> _Loader:
        """The loader the harness iterates (also usable directly, e.g. in tests)."""
        sampler = ShardedBatchSampler(
            len(self.dataset),
            self.batch_size,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            seed=seed,
            rank=rank,
            size=size,
        )
        return _Loader(self.dataset, sampler, self.kwargs, seed)

    def __len__(self) -> int:
        return ShardedBatchSampler(
            len(self.dataset), self.batch_size, shuffle=False, drop_last=self.drop_last
        ).__len__()


class ShardedBatchSampler(tdata.Sampler[list[int]]):
    """Per-epoch batches of indices for one worker; `set_epoch(e, skip=k)` before iterating."""

    def __init__(
        self,
        num_records: int,
        batch_size: int,
        *,
        shuffle: bool,
        drop_last: bool,
        seed: int = 0,
        rank: int = 0,
        size: int = 1,
        pad: bool = True,
    ) -> None:
        self.num_records = num_records
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.rank = rank
        self.size = size
        self.pad = pad  # training pads so every worker has as many batches; validation doesn't
        self.epoch = 0
        self.skip = 0
        global_bs = batch_size * size
        if drop_last:
            self._global_batches = num_records // global_bs
            self._used = self._global_batches * global_bs
        else:
            self._global_batches = math.ceil(num_records / global_bs)
            self._used = num_records
        if self._global_batches == 0:
            raise ValueError(
                f"the dataset has {num_records} records: not one full batch of "
                f"{global_bs} ({size} worker(s) x {batch_size})"
            )

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        self.epoch = epoch
        self.skip = skip

    def __len__(self) -> int:
        if self.pad or self.drop_last:
            return self._global_batches
        mine = len(range(self.rank, self._used, self.size))
        return math.ceil(mine / self.batch_size)

    def _order(self) -> list[int]:
        if self.shuffle:
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + self.epoch) % _SEED_MOD)
            order = torch.randperm(self.num_records, generator=g)[: self._used].tolist()
        else:
            order = list(range(self._used))
        if self.pad and self.size > 1 and len(order) % self.size:
            need = self.size - len(order) % self.size
            order += (order * (need // max(len(order), 1) + 1))[:need]
        return order

    def __iter__(self) -> Iterator[list[int]]:
        mine = self._order()[self.rank :: self.size]
        bs = self.batch_size
        for i in range(self.skip, math.ceil(len(mine) / bs)):
            yield mine[i * bs : (i + 1) * bs]


class _Loader:
    """A torch DataLoader over a `ShardedBatchSampler`, with an epoch-seeded generator."""

    def __init__(
        self, dataset: Any, sampler: ShardedBatchSampler, kwargs: dict[str, Any], seed: int
    ) -> None:
        self.sampler = sampler
        self._seed = seed
        self._gen = torch.Generator()
        self.loader = tdata.DataLoader(
            dataset, batch_sampler=sampler, generator=self._gen, **kwargs
        )

    def __len__(self) -> int:
        return len(self.sampler)

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[Any]:
        """Iterate epoch `epoch` from batch `skip` on."""
        self.sampler.set_epoch(epoch, skip)
        # The DataLoader draws its workers' base seed from this generator (not the global RNG).
        self._gen.manual_seed((self._seed * 7_919 + epoch * 104_729 + skip) % _SEED_MOD)
        return iter(self.loader)


class _PlainLoader:
    """A loader the harness cannot reshard: iterated as is; resuming skips by iterating."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        try:
            self._len: int | None = len(loader)
        except TypeError:
            self._len = None

    def __len__(self) -> int:
        if self._len is None:
            raise TypeError("the data loader has no length")
        return self._len

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[Any]:
        sampler = getattr(self.loader, "sampler", None)
        if sampler is not None and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # e.g. torch's DistributedSampler
        it = iter(self.loader)
        for _ in range(skip):
            next(it, None)
        return it


def adopt(
    loader: Any, *, seed: int, rank: int, size: int, training: bool
) -> _Loader | _PlainLoader:
    """What the harness iterates for a data loader returned by the trial."""
    if isinstance(loader, DataLoader):
        out = loader.get_data_loader(seed=seed, rank=rank, size=size)
        out.sampler.pad = training
        return out
    if isinstance(loader, tdata.DataLoader) and not isinstance(
        loader.dataset, tdata.IterableDataset
    ):
        sampler = loader.sampler
        default = type(sampler) in (tdata.RandomSampler, tdata.SequentialSampler)
        if (
            default
            and loader.batch_size is not None
            and type(loader.batch_sampler) is tdata.BatchSampler
            and not (isinstance(sampler, tdata.RandomSampler) and sampler.replacement)
        ):
            kwargs: dict[str, Any] = {
                "num_workers": loader.num_workers,
                "collate_fn": loader.collate_fn,
                "pin_memory": loader.pin_memory,
                "timeout": loader.timeout,
                "worker_init_fn": loader.worker_init_fn,
                "persistent_workers": loader.persistent_workers,
            }
            if loader.num_workers > 0:
                kwargs["prefetch_factor"] = loader.prefetch_factor
                kwargs["multiprocessing_context"] = loader.multiprocessing_context
            wrapper = DataLoader(
                loader.dataset,
                batch_size=loader.batch_size,
                shuffle=isinstance(sampler, tdata.RandomSampler),
                drop_last=loader.drop_last,
                **kwargs,
            )
            return adopt(wrapper, seed=seed, rank=rank, size=size, training=training)
    if isinstance(loader, _Loader | _PlainLoader):
        return loader
    return _PlainLoader(loader)
