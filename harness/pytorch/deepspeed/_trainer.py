"""Determined 0.38's DeepSpeed Trainer API (`examples/deepspeed/dcgan` trains this way):

    with det_ds.init() as train_context:
        trial = MyTrial(train_context, hparams)
        det_ds.Trainer(trial, train_context).fit(max_length=pytorch.Batch(200))

`fit` is `pytorch.Trainer.fit` (same lengths and periods) on the DeepSpeedTrial loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from harness.core import Context as CoreContext
from harness.core import DistributedContext
from harness.pytorch import _trainer
from harness.pytorch.deepspeed._context import DeepSpeedTrialContext
from harness.pytorch.deepspeed._controller import DeepSpeedController
from harness.pytorch.deepspeed._import import ensure_process_group, import_deepspeed
from harness.pytorch.deepspeed._trial import DeepSpeedTrial


class Trainer(_trainer.Trainer):
    """`det_ds.Trainer(trial, context).fit(...)`."""

    _trial_type = DeepSpeedTrial
    _controller_class = DeepSpeedController

    def fit(self, *args: Any, **kwargs: Any) -> Any:
        if not self._context.models:
            raise RuntimeError(
                f"{type(self._trial).__name__} registered no model engine: call "
                "context.wrap_model_engine(engine) with deepspeed.initialize's engine"
            )
        return super().fit(*args, **kwargs)


def _process_group(core: CoreContext) -> None:
    import_deepspeed()
    if core.distributed.size == 1:
        ensure_process_group("nccl" if torch.cuda.is_available() else "gloo")


@contextlib.contextmanager
def init(
    *,
    hparams: dict[str, Any] | None = None,
    exp_conf: dict[str, Any] | None = None,
    distributed: DistributedContext | None = None,
    enable_tensorboard_logging: bool = True,
) -> Iterator[DeepSpeedTrialContext]:
    """Determined 0.38's `det_ds.init()`: a DeepSpeedTrialContext (see `pytorch.init`); the
    process group is the launcher's (`determined.launch.deepspeed`), or a one-worker one."""
    with _trainer.init_context(
        DeepSpeedTrialContext,
        hparams=hparams,
        exp_conf=exp_conf,
        distributed=distributed,
        enable_tensorboard_logging=enable_tensorboard_logging,
        before=_process_group,
    ) as context:
        yield context
