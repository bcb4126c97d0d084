"""Determined 0.38's `core_v2`: the Core API as module-level contexts, managed or unmanaged.

```python
from harness.experimental import core_v2      # on the cluster: determined.experimental.core_v2

core_v2.init(defaults=core_v2.DefaultConfig(name="unmanaged-mnist", hparams={"lr": 0.01}))
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
"""

from __future__ import annotations

import atexit
import logging
import sys
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from harness import core
from harness._info import ClusterInfo, get_cluster_info
from harness.api import Session
from harness.api.client import Client
from harness.core._checkpoint import CheckpointContext
from harness.core._distributed import DistributedContext, DummyDistributedContext
from harness.core._preempt import PreemptContext, PreemptMode
from harness.core._searcher import SearcherContext
from harness.core._shipper import MetricsShipper
from harness.core._train import TrainContext
from harness.storage import build

if TYPE_CHECKING:
    from harness.client import Determined

logger = logging.getLogger("harness.core_v2")


@dataclass
class DefaultConfig:
    """What an unmanaged run's experiment is made of (ignored on the cluster, where the
    experiment's own config applies). `searcher` defaults to single with metric `loss`."""

    name: str | None = None
    hparams: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    description: str | None = None
    labels: list[str] | None = None
    checkpoint_storage: str | dict[str, Any] | None = None
    searcher: dict[str, Any] | None = None


@dataclass
class UnmanagedConfig:
    """Determined's unmanaged options; detlab has no workspaces, projects or external ids to
    attach, so they are recorded in the experiment's description only when given."""

    workspace: str | None = None
    project: str | None = None
    external_experiment_id: str | None = None
    external_trial_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# The contexts, as in Determined: set by init(), cleared by close().
info: ClusterInfo | None = None
train: TrainContext | None = None
checkpoint: CheckpointContext | None = None
searcher: SearcherContext | None = None
preempt: PreemptContext | None = None
distributed: DistributedContext | None = None


class _Run:
    """What close() needs: the context, and for an unmanaged run its trial on the master."""

    def __init__(self, ctx: core.Context, client: Client | None, trial_id: int | None) -> None:
        self.ctx = ctx
        self.client = client
        self.trial_id = trial_id
        self.failure: str | None = None


_run: _Run | None = None
_previous_excepthook = sys.excepthook


def init(
    *,
    defaults: DefaultConfig | None = None,
    client: Determined | None = None,
    unmanaged: UnmanagedConfig | None = None,
    config: DefaultConfig | None = None,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | dict[str, Any] | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: Any = None,
) -> None:
    """Set up `train`, `checkpoint`, `searcher`, `preempt`, `distributed` and `info`."""
    global _run
    if _run is not None:
        raise RuntimeError("core_v2.init() was already called; call core_v2.close() first")
    if get_cluster_info() is not None:
        ctx = core.init(
            distributed=distributed,
            checkpoint_storage=checkpoint_storage,
            preempt_mode=preempt_mode,
            tensorboard_mode=tensorboard_mode,
        )
        _run = _Run(ctx, None, None)
    else:
        if distributed is not None and distributed.size > 1:
            raise ValueError("an unmanaged run is one process; start it on the cluster instead")
        wanted = defaults or config or DefaultConfig()
        _run = _start_unmanaged(wanted, unmanaged, client, checkpoint_storage)
        atexit.register(_close_at_exit)
        sys.excepthook = _note_failure
    _publish(_run.ctx)


def close(exception: BaseException | None = None) -> None:
    """Flush metrics, and for an unmanaged run tell the master how it ended."""
    global _run
    run, _run = _run, None
    if run is None:
        return
    if exception is not None and run.failure is None:
        run.failure = f"{type(exception).__name__}: {exception}"
    run.ctx.close(type(exception) if exception is not None else None)
    if run.client is not None and run.trial_id is not None:
        code = 0 if run.failure is None else 1
        run.client.session.request(
            "POST",
            f"/trials/{run.trial_id}/unmanaged/exit",
            json={"exit_code": code, "error": run.failure},
        )
        atexit.unregister(_close_at_exit)
        sys.excepthook = _previous_excepthook
    _publish(None)


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
    if _run is not None:
        _run.failure = f"{etype.__name__}: {value}"
    _previous_excepthook(etype, value, tb)


def _close_at_exit() -> None:
    try:
        close()
    except Exception as e:  # the interpreter is ending: say it, do not raise
        logger.error("could not report the unmanaged run's end to the master: %s", e)


def experiment_config(wanted: DefaultConfig, unmanaged: UnmanagedConfig | None) -> dict[str, Any]:
    """The unmanaged experiment's config, in Determined's keys."""
    cfg: dict[str, Any] = {
        "name": wanted.name or "unmanaged",
        "unmanaged": True,
        "hyperparameters": {
            k: {"type": "const", "val": v} for k, v in (wanted.hparams or {}).items()
        },
        "searcher": wanted.searcher or {"name": "single", "metric": "loss"},
        "max_restarts": 0,
    }
    notes = [wanted.description] if wanted.description else []
    if unmanaged is not None:
        ids = {
            "workspace": unmanaged.workspace,
            "project": unmanaged.project,
            "external experiment": unmanaged.external_experiment_id,
            "external trial": unmanaged.external_trial_id,
        }
        notes += [f"{k}: {v}" for k, v in ids.items() if v]
    if notes:
        cfg["description"] = "; ".join(notes)
    if wanted.data is not None:
        cfg["data"] = wanted.data
    if wanted.labels:
        cfg["labels"] = list(wanted.labels)
    if isinstance(wanted.checkpoint_storage, dict):
        cfg["checkpoint_storage"] = wanted.checkpoint_storage
    return cfg


def _start_unmanaged(
    wanted: DefaultConfig,
    unmanaged: UnmanagedConfig | None,
    client: Determined | None,
    checkpoint_storage: str | dict[str, Any] | None,
) -> _Run:
    from harness.client import Determined

    api = (client or Determined()).api
    text = yaml.safe_dump(experiment_config(wanted, unmanaged), sort_keys=False)
    exp = api.create_experiment(text, None, activate=True)
    trial_id = _first_trial(api, int(exp["id"]))
    storage_cfg = checkpoint_storage or wanted.checkpoint_storage
    if storage_cfg is None:  # the master's default storage, as a managed trial gets it
        storage_cfg = api.get_experiment_config(int(exp["id"]))["config"].get("checkpoint_storage")
    dist = DummyDistributedContext()
    # The user's own session writes to the trial: the master lets an unmanaged trial's owner
    # report for it (a managed trial only takes its allocation's token).
    session: Session = api.session
    shipper = MetricsShipper(api, trial_id, _orphaned)
    train_ctx = TrainContext(shipper, dist, api, trial_id)
    ctx = core.Context(
        checkpoint=CheckpointContext(lambda: build(storage_cfg), dist, api, trial_id),
        distributed=dist,
        preempt=PreemptContext(None, None, dist, PreemptMode.WorkersAskChief),
        train=train_ctx,
        searcher=SearcherContext(api, trial_id, train_ctx, dist),
        shipper=shipper,
    )
    logger.info("unmanaged run: experiment %s, trial %s on %s", exp["id"], trial_id, session.master)
    return _Run(ctx, api, trial_id)


def _first_trial(api: Client, exp_id: int) -> int:
    trials = api.list_experiment_trials(exp_id)
    if not trials:
        raise RuntimeError(f"the master made no trial for unmanaged experiment {exp_id}")
    return int(trials[0]["id"])


def _orphaned(message: str) -> None:
    logger.error("%s: the master ended this unmanaged trial; its reports are refused", message)


__all__ = [
    "DefaultConfig",
    "UnmanagedConfig",
    "checkpoint",
    "close",
    "distributed",
    "info",
    "init",
    "preempt",
    "searcher",
    "train",
]
