"""`harness.pytorch.deepspeed` (`determined.pytorch.deepspeed`): Determined 0.38's DeepSpeedTrial.

    import deepspeed
    from determined.pytorch import deepspeed as det_ds

    class MyTrial(det_ds.DeepSpeedTrial):
        def __init__(self, context: det_ds.DeepSpeedTrialContext) -> None:
            engine, _, _, _ = deepspeed.initialize(model=..., model_parameters=..., config=...)
            self.engine = context.wrap_model_engine(engine)
        def train_batch(self, dataloader_iter, epoch_idx, batch_idx) -> dict: ...
        def evaluate_batch(self, dataloader_iter, batch_idx) -> dict: ...

Or the Trainer API: `with det_ds.init() as ctx: det_ds.Trainer(MyTrial(ctx, ...), ctx).fit(...)`.
Needs the `deepspeed` extra. Without a GPU DeepSpeed runs its CPU path (`DS_ACCELERATOR=cpu`, set
here before DeepSpeed is imported when CUDA is absent) over gloo. See docs/determined-compat.md.
"""

from harness.pytorch.deepspeed._context import (
    DeepSpeedTrialContext,
    ModelParallelUnit,
    make_data_parallel_mpu,
    overwrite_deepspeed_config,
)
from harness.pytorch.deepspeed._trainer import Trainer, init
from harness.pytorch.deepspeed._trial import DeepSpeedTrial

__all__ = [
    "DeepSpeedTrial",
    "DeepSpeedTrialContext",
    "ModelParallelUnit",
    "make_data_parallel_mpu",
    "overwrite_deepspeed_config",
    "Trainer",
    "init",
]
