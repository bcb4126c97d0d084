"""`core_context.searcher`: the lengths the searcher wants this trial trained to."""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Iterator
from typing import Any

from harness.api import Backoff
from harness.api.client import Client
from harness.core._distributed import DistributedContext
from harness.core._jsonable import jsonable
from harness.core._train import TrainContext

logger = logging.getLogger("harness.core.searcher")


class SearcherMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


class SearcherOperation:
    """Train until `length` (total, in the unit of `searcher.max_length`), then report."""

    def __init__(self, searcher: SearcherContext, length: int, is_chief: bool) -> None:
        self._searcher = searcher
        self._length = length
        self._is_chief = is_chief
        self._completed = False

    @property
    def length(self) -> int:
        return self._length

    @property
    def completed(self) -> bool:
        return self._completed

    def report_progress(self, length: float) -> None:
        """How far (in units of `length`) training got; shown as the trial's progress."""
        if not self._is_chief:
            raise RuntimeError("only the chief may report searcher progress")
        frac = 0.0 if self._length <= 0 else max(0.0, min(1.0, float(length) / self._length))
        self._searcher._train.report_progress(frac)

    def report_completed(self, searcher_metric: Any) -> None:
        """Validation result at `length`; flushes metrics first so the searcher sees them."""
        if not self._is_chief:
            raise RuntimeError("only the chief may report a completed searcher operation")
        if self._completed:
            raise RuntimeError(f"searcher operation (length {self._length}) already completed")
        metric = jsonable(searcher_metric)
        if not isinstance(metric, (int, float, str)) or isinstance(metric, bool):
            raise TypeError(
                f"searcher_metric must be a number, not {type(searcher_metric).__name__}"
            )
        self._searcher._complete(self._length, metric)
        self._completed = True


class SearcherContext:
    def __init__(
        self,
        client: Client | None,
        trial_id: int | None,
        train: TrainContext,
        distributed: DistributedContext,
        local_max_length: int = 1,
        poll_interval: float = 0.5,
    ) -> None:
        self._client = client
        self._trial_id = trial_id
        self._train = train
        self._dist = distributed
        self._local_max_length = local_max_length
        self._poll_interval = poll_interval

    def operations(
        self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief, auto_ack: bool = True
    ) -> Iterator[SearcherOperation]:
        """Yield operations until the searcher wants no more work from this trial.

        Each one must be `report_completed()` before asking for the next. With
        `WorkersAskChief` every worker iterates (the chief broadcasts); with `ChiefOnly` only
        the chief may call this.
        """
        is_chief = self._dist.rank == 0
        if searcher_mode == SearcherMode.ChiefOnly and not is_chief:
            raise RuntimeError("SearcherMode.ChiefOnly: only the chief may iterate operations")
        if self._client is None:
            yield from self._local_operations()
            return
        while True:
            length = self._next_length() if is_chief else None
            if searcher_mode == SearcherMode.WorkersAskChief and self._dist.size > 1:
                length = self._dist.broadcast(length)
            if length is None:
                return
            op = SearcherOperation(self, length, is_chief)
            yield op
            if is_chief and not op.completed:
                raise RuntimeError(
                    f"the searcher operation (length {length}) was not completed: call "
                    "op.report_completed(searcher_metric) before moving to the next operation"
                )

    def _local_operations(self) -> Iterator[SearcherOperation]:
        op = SearcherOperation(self, self._local_max_length, self._dist.rank == 0)
        yield op
        if self._dist.rank == 0 and not op.completed:
            raise RuntimeError(
                f"the searcher operation (length {op.length}) was not completed: call "
                "op.report_completed(searcher_metric) before moving to the next operation"
            )

    def _next_length(self) -> int | None:
        """Ask the master until it has an operation or says the trial is done."""
        assert self._client is not None and self._trial_id is not None
        backoff = Backoff(first=self._poll_interval, cap=5.0, factor=1.5)
        while True:
            body = self._client.get_searcher_operation(self._trial_id)
            op = body.get("operation")
            if op is not None:
                return int(op["length"])
            if body.get("completed"):
                return None
            time.sleep(backoff.next())  # the searcher is still deciding (e.g. waiting on a rung)

    def _complete(self, length: int, metric: Any) -> None:
        if self._client is None or self._trial_id is None:
            logger.info("searcher operation (length %d) completed: %s", length, metric)
            return
        self._train.flush()
        self._client.complete_searcher_operation(self._trial_id, length, metric)

    def acknowledge_out_of_ops(self) -> None:
        """Determined compatibility: nothing to do, the master already knows."""
