"""`harness.core.init()`: the Core API entry point, on a cluster or locally for debugging."""

from __future__ import annotations

import logging
import os
import signal
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness._exceptions import InvalidHP
from harness._info import ClusterInfo, get_cluster_info
from harness.api import DetError, Session, outage_from_env
from harness.api.client import Client
from harness.core._checkpoint import CheckpointContext
from harness.core._distributed import DistributedContext, DummyDistributedContext, from_env
from harness.core._preempt import PreemptContext, PreemptMode
from harness.core._searcher import SearcherContext
from harness.core._shipper import MetricsShipper
from harness.core._tensorboard import TensorboardManager, local_root
from harness.core._train import EarlyExitReason, TensorboardMode, TrainContext
from harness.storage import StorageManager, build

logger = logging.getLogger("harness.core")

# How long context exit waits for queued metrics while the master is unreachable.
EXIT_FLUSH_TIMEOUT = float(os.environ.get("DET_METRICS_FLUSH_TIMEOUT", "600"))
ORPHAN_GRACE = 10.0


def _default_orphaned(message: str) -> None:
    """The master ended this allocation: stop now (SIGTERM ourselves; hard exit if ignored)."""
    logger.error("%s: this trial is orphaned and stops now", message)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        timer = threading.Timer(ORPHAN_GRACE, lambda: os._exit(1))
        timer.daemon = True
        timer.start()


class Context:
    """What `core.init()` returns: `.train`, `.searcher`, `.checkpoint`, `.preempt`,
    `.distributed` and `.info`. Use it as a context manager so it closes cleanly."""

    def __init__(
        self,
        *,
        checkpoint: CheckpointContext,
        distributed: DistributedContext,
        preempt: PreemptContext,
        train: TrainContext,
        searcher: SearcherContext,
        info: ClusterInfo | None = None,
        shipper: MetricsShipper | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.distributed = distributed
        self.preempt = preempt
        self.train = train
        self.searcher = searcher
        self.info = info
        self._shipper = shipper
        self._closed = False

    def __enter__(self) -> Context:
        return self

    def close(self, exc_type: type[BaseException] | None = None) -> None:
        """Flush metrics and stop the background threads (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.preempt.close()
        self.train.close_tensorboard()
        if self._shipper is not None:
            if not self._shipper.close(timeout=EXIT_FLUSH_TIMEOUT):
                logger.error(
                    "%d metrics reports could not be delivered to the master",
                    self._shipper.pending,
                )
            if self._shipper.dropped:
                logger.error(
                    "%d metrics reports were rejected by the master", self._shipper.dropped
                )
        self.distributed.close(wait_for_peers=exc_type is None)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> bool:
        self.close(exc_type)
        if exc_type is not None and issubclass(exc_type, InvalidHP):
            logger.info("InvalidHP raised: reporting an early exit (INVALID_HP) and exiting 0")
            try:
                self.train.report_early_exit(EarlyExitReason.INVALID_HP)
            except DetError as e:
                logger.error("could not report the early exit: %s", e)
            return True
        return False  # everything else propagates with the user's own traceback


def _tensorboard_mode(value: TensorboardMode | str | None) -> TensorboardMode:
    if value is None:
        return TensorboardMode.AUTO
    if isinstance(value, TensorboardMode):
        return value
    try:
        return TensorboardMode(str(value).upper())
    except ValueError:
        raise ValueError(
            f"tensorboard_mode must be TensorboardMode.AUTO or MANUAL, not {value!r}"
        ) from None


def _storage_factory(
    checkpoint_storage: str | os.PathLike[str] | dict[str, Any] | StorageManager | None,
    info: ClusterInfo | None,
) -> Callable[[], StorageManager]:
    def factory() -> StorageManager:
        if isinstance(checkpoint_storage, StorageManager):
            return checkpoint_storage
        if checkpoint_storage is not None:
            return build(checkpoint_storage)
        if info is None:
            return build(Path.cwd() / "checkpoints")
        cfg = info.trial.config.get("checkpoint_storage")
        if not cfg:
            raise ValueError(
                "no checkpoint_storage in the experiment config (DET_EXPERIMENT_CONFIG)"
            )
        return build(cfg)

    return factory


def init(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | os.PathLike[str] | dict[str, Any] | StorageManager | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode | str | None = None,
    async_checkpointing: bool = False,
    on_orphaned: Callable[[str], None] | None = None,
) -> Context:
    """Build the Core API context for this process.

    On a cluster (the `DET_*` environment is set) it talks to the master with the allocation's
    session token. Off-cluster it works locally: metrics go to the log, checkpoints to
    `./checkpoints/<uuid>` (or `checkpoint_storage`), the searcher yields one operation of
    length `DET_MAX_LENGTH` (default 1) and preemption never comes.
    `tensorboard_mode` (default AUTO) says whether reported metrics become TensorBoard events
    uploaded to checkpoint storage (docs/tensorboard.md); `async_checkpointing` is accepted for
    Determined compatibility.
    Without `distributed`, a process started by a launcher with several workers (`WORLD_SIZE`
    > 1, e.g. `python3 -m harness.launch.torch_distributed`) joins torch.distributed itself.
    """
    dist = distributed or from_env() or DummyDistributedContext()
    info = get_cluster_info()
    storage = _storage_factory(checkpoint_storage, info)
    mode = _tensorboard_mode(tensorboard_mode)
    if info is None:
        train = TrainContext(None, dist, tensorboard_mode=mode)
        return Context(
            checkpoint=CheckpointContext(storage, dist),
            distributed=dist,
            preempt=PreemptContext(None, None, dist, preempt_mode),
            train=train,
            searcher=SearcherContext(
                None, None, train, dist, local_max_length=int(os.environ.get("DET_MAX_LENGTH", 1))
            ),
        )

    orphaned = on_orphaned or _default_orphaned
    # Every call of this trial rides out a master restart for DET_MASTER_OUTAGE_S seconds.
    client = Client(Session(info.master_url, info.session_token, outage_s=outage_from_env()))
    trial_id = info.trial.trial_id
    shipper = MetricsShipper(client, trial_id, orphaned) if dist.rank == 0 else None
    tensorboard = TensorboardManager(
        local_root(info.allocation_id, dist.rank),
        storage,
        info.trial.experiment_id,
        trial_id,
        dist.rank,
    )
    train = TrainContext(shipper, dist, client, trial_id, tensorboard, mode)
    return Context(
        checkpoint=CheckpointContext(storage, dist, client, trial_id, train.flush),
        distributed=dist,
        preempt=PreemptContext(client, info.allocation_id, dist, preempt_mode, orphaned),
        train=train,
        searcher=SearcherContext(client, trial_id, train, dist),
        info=info,
        shipper=shipper,
    )
