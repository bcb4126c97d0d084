"""Determined 0.38's `core_v2`: the Core API as module-level contexts, managed or unmanaged.

```python
from harness.experimental import core_v2      # on the cluster: determined.experimental.core_v2

core_v2.init(config=core_v2.Config(name="unmanaged-mnist", hparams={"lr": 0.01}))
for step in range(1, 101):
    core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": ...})
core_v2.train.report_validation_metrics(steps_completed=100, metrics={"loss": ...})
core_v2.close()
```

On the cluster (a trial the master started), `init()` is `core.init()`: the experiment's config
wins over `defaults`. Off the cluster, `init()` starts an **unmanaged** run: it creates an
experiment (config `unmanaged: true`, one trial) on the master named by `DET_MASTER` as the
logged-in user (or `client=`), and the script reports metrics and checkpoints to that trial. The
master never schedules an unmanaged trial; it shows RUNNING until `close()` (or the end of the
script) reports how it ended: COMPLETED on a clean exit, ERROR after an uncaught exception.
An unmanaged run is one process (no distributed training), like Determined's.
`init_context(config=...)` is the same as a context manager (`with ... as core_context:`).
"""

from __future__ import annotations

import atexit
import logging
import sys
import types
from typing import TYPE_CHECKING, Any

import yaml

from harness import core
from harness._info import ClusterInfo, TrialInfo, get_cluster_info
from harness.api import Session
from harness.api.client import Client
from harness.core._checkpoint import CheckpointContext
from harness.core._distributed import DistributedContext, DummyDistributedContext
from harness.core._preempt import PreemptContext, PreemptMode
from harness.core._searcher import SearcherContext
from harness.core._shipper import MetricsShipper
from harness.core._train import TensorboardMode, TrainContext
from harness.experimental._core_v2_config import (
    Config,
    DefaultConfig,
    UnmanagedConfig,
    experiment_config,
    merge_config,
    storage_config,
)
from harness.storage import build

if TYPE_CHECKING:
    from harness.client import Determined

logger = logging.getLogger("harness.core_v2")


# The contexts, as in Determined: set by init(), cleared by close().
info: ClusterInfo | None = None
train: TrainContext | None = None
checkpoint: CheckpointContext | None = None
searcher: SearcherContext | None = None
preempt: PreemptContext | None = None
distributed: DistributedContext | None = None


class UnmanagedContext(core.Context):
    """A Core context whose close() also tells the master how the unmanaged trial ended."""

    client: Client
    trial_id: int
    experiment_id: int
    failure: str | None = None

    def close(self, exc_type: type[BaseException] | None = None) -> None:
        if self._closed:
            return
        super().close(exc_type)
        if exc_type is not None and self.failure is None:
            self.failure = exc_type.__name__
        self.client.session.request(
            "POST",
            f"/trials/{self.trial_id}/unmanaged/exit",
            json={"exit_code": 0 if self.failure is None else 1, "error": self.failure},
        )


_run: core.Context | None = None
_client: Determined | None = None
_previous_excepthook = sys.excepthook


def init_context(
    *,
    config: Config | None = None,
    defaults: Config | None = None,
    unmanaged: UnmanagedConfig | None = None,
    client: Determined | None = None,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | dict[str, Any] | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: Any = None,
) -> core.Context:
    """The Core context (a context manager): `core.init()` on the cluster, else an unmanaged
    run whose end (clean, or the exception that left the `with`) is reported to the master."""
    managed = get_cluster_info() is not None
    wanted = merge_config(config, defaults, unmanaged, managed=managed)
    if managed:
        return core.init(
            distributed=distributed,
            checkpoint_storage=checkpoint_storage,
            preempt_mode=preempt_mode,
            tensorboard_mode=tensorboard_mode,
        )
    if distributed is not None and distributed.size > 1:
        raise ValueError("an unmanaged run is one process; start it on the cluster instead")
    return _start_unmanaged(wanted, client, checkpoint_storage)


def init(
    *,
    config: Config | None = None,
    defaults: Config | None = None,
    unmanaged: UnmanagedConfig | None = None,
    client: Determined | None = None,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | dict[str, Any] | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: Any = None,
) -> None:
    """Set up `train`, `checkpoint`, `searcher`, `preempt`, `distributed` and `info`."""
    global _run, _client
    if _run is not None:
        raise RuntimeError("core_v2.init() was already called; call core_v2.close() first")
    _client = client
    _run = init_context(
        config=config,
        defaults=defaults,
        unmanaged=unmanaged,
        client=client,
        distributed=distributed,
        checkpoint_storage=checkpoint_storage,
        preempt_mode=preempt_mode,
        tensorboard_mode=tensorboard_mode,
    )
    if isinstance(_run, UnmanagedContext):
        atexit.register(_close_at_exit)
        sys.excepthook = _note_failure
    _publish(_run)


def close(exception: BaseException | None = None) -> None:
    """Flush metrics, and for an unmanaged run tell the master how it ended."""
    global _run
    run, _run = _run, None
    if run is None:
        return
    if isinstance(run, UnmanagedContext):
        if exception is not None and run.failure is None:
            run.failure = f"{type(exception).__name__}: {exception}"
        atexit.unregister(_close_at_exit)
        sys.excepthook = _previous_excepthook
    run.close(type(exception) if exception is not None else None)
    _publish(None)


def url_reverse_webui_exp_view() -> str:
    """The web page of the experiment this run reports to (after init())."""
    if _run is None:
        raise RuntimeError("call core_v2.init() first")
    if isinstance(_run, UnmanagedContext):
        master, exp_id = _run.client.master, _run.experiment_id
    else:
        assert info is not None and info.trial is not None
        master, exp_id = info.master_url, info.trial.experiment_id
    return f"{master.rstrip('/')}/experiments/{exp_id}"


def _publish(ctx: core.Context | None) -> None:
    global info, train, checkpoint, searcher, preempt, distributed
    info = ctx.info if ctx else None
    train = ctx.train if ctx else None
    checkpoint = ctx.checkpoint if ctx else None
    searcher = ctx.searcher if ctx else None
    preempt = ctx.preempt if ctx else None
    distributed = ctx.distributed if ctx else None


def _note_failure(
    etype: type[BaseException], value: BaseException, tb: types.TracebackType | None
) -> None:
    if isinstance(_run, UnmanagedContext):
        _run.failure = f"{etype.__name__}: {value}"
    _previous_excepthook(etype, value, tb)


def _close_at_exit() -> None:
    try:
        close()
    except Exception as e:  # the interpreter is ending: say it, do not raise
        logger.error("could not report the unmanaged run's end to the master: %s", e)


def _start_unmanaged(
    wanted: Config,
    client: Determined | None,
    checkpoint_storage: str | dict[str, Any] | None,
) -> UnmanagedContext:
    from harness.client import Determined

    api = (client or Determined()).api
    text = yaml.safe_dump(experiment_config(wanted), sort_keys=False)
    exp = api.create_experiment(text, None, activate=True)
    trial = _first_trial(api, int(exp["id"]))
    trial_id = int(trial["id"])
    stored = api.get_experiment_config(int(exp["id"]))["config"]
    # The run's own storage settings (credentials included); else the master's default, as a
    # managed trial gets it.
    storage_cfg = (
        storage_config(checkpoint_storage)
        or storage_config(wanted.checkpoint_storage)
        or stored.get("checkpoint_storage")
    )
    dist = DummyDistributedContext()
    # The user's own session writes to the trial: the master lets an unmanaged trial's owner
    # report for it (a managed trial only takes its allocation's token).
    session: Session = api.session
    shipper = MetricsShipper(api, trial_id, _orphaned)
    train_ctx = TrainContext(shipper, dist, api, trial_id)
    info = ClusterInfo(
        master_url=api.master,
        session_token=session.token or "",
        allocation_id="",
        trial=TrialInfo(
            trial_id=trial_id,
            experiment_id=int(exp["id"]),
            trial_seed=int(trial.get("seed") or 0),
            hparams=dict(trial.get("hparams") or {}),
            config=stored,
            request_id=trial.get("request_id"),
        ),
    )
    ctx = UnmanagedContext(
        info=info,
        checkpoint=CheckpointContext(lambda: build(storage_cfg), dist, api, trial_id),
        distributed=dist,
        preempt=PreemptContext(None, None, dist, PreemptMode.WorkersAskChief),
        train=train_ctx,
        searcher=SearcherContext(api, trial_id, train_ctx, dist),
        shipper=shipper,
    )
    ctx.client, ctx.trial_id, ctx.experiment_id = api, trial_id, int(exp["id"])
    logger.info("unmanaged run: experiment %s, trial %s on %s", exp["id"], trial_id, session.master)
    return ctx


def _first_trial(api: Client, exp_id: int) -> dict[str, Any]:
    trials = api.list_experiment_trials(exp_id)
    if not trials:
        raise RuntimeError(f"the master made no trial for unmanaged experiment {exp_id}")
    return dict(trials[0])


def _orphaned(message: str) -> None:
    logger.error("%s: the master ended this unmanaged trial; its reports are refused", message)


__all__ = [
    "Config",
    "DefaultConfig",
    "DistributedContext",
    "PreemptMode",
    "TensorboardMode",
    "UnmanagedConfig",
    "checkpoint",
    "close",
    "distributed",
    "info",
    "init",
    "init_context",
    "preempt",
    "searcher",
    "train",
    "url_reverse_webui_exp_view",
]
