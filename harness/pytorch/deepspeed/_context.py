"""`DeepSpeedTrialContext`: what a DeepSpeedTrial registers (its model engines) and reads."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.core import DistributedContext
from harness.pytorch._context import PyTorchTrialContext
from harness.pytorch.deepspeed._import import import_deepspeed
from harness.util import merge_dicts

logger = logging.getLogger("harness.pytorch")


@dataclass
class ModelParallelUnit:
    """Where this worker sits for data parallelism (Determined's MPU)."""

    data_parallel_rank: int
    data_parallel_world_size: int
    should_report_metrics: bool
    should_build_data_loader: bool


def make_data_parallel_mpu(dist: DistributedContext) -> ModelParallelUnit:
    return ModelParallelUnit(dist.rank, dist.size, dist.rank == 0, True)


def overwrite_deepspeed_config(
    base_ds_config: str | dict[str, Any], source_ds_dict: dict[str, Any]
) -> dict[str, Any]:
    """`base_ds_config` (a path to a JSON file or a dict) with `source_ds_dict`'s values merged
    over it (Determined's rule: nested dicts merge, other values replace)."""
    if isinstance(base_ds_config, str | Path):
        base = json.loads(Path(base_ds_config).read_text())
    elif isinstance(base_ds_config, dict):
        base = base_ds_config
    else:
        raise TypeError(
            f"base_ds_config must be a path or a dict, not {type(base_ds_config).__name__}"
        )
    return merge_dicts(base, source_ds_dict)


class DeepSpeedTrialContext(PyTorchTrialContext):
    """PyTorchTrialContext's hyperparameters, config, reducers, TensorBoard and training position,
    plus DeepSpeed's model engines. The optimizer, LR scheduler and mixed precision belong to
    `deepspeed.initialize`, so the PyTorchTrial wrappers for them are refused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mpu = make_data_parallel_mpu(self.distributed)
        self._train_micro_batch_size_per_gpu: int | None = None
        self._num_micro_batches_per_slot: int | None = None
        self._use_pipeline_parallel = False
        self._manual_grad_accumulation = False
        self._data_repro_checks_disabled = False
        self._check_optimizations()

    def _check_optimizations(self) -> None:
        opts = self.get_experiment_config().get("optimizations") or {}
        if opts.get("mixed_precision", "O0") != "O0":
            raise ValueError(
                "optimizations.mixed_precision: with DeepSpeedTrial, mixed precision is set in "
                "the DeepSpeed config (fp16/bf16), not in the experiment config"
            )
        if int(opts.get("aggregation_frequency", 1)) > 1:
            raise ValueError(
                "optimizations.aggregation_frequency: with DeepSpeedTrial, gradient "
                "accumulation is set in the DeepSpeed config (gradient_accumulation_steps)"
            )

    def wrap_model_engine(self, model: Any) -> Any:
        """Register a DeepSpeed engine: checkpointed through its save_checkpoint, and the first
        one's micro batch size and gradient accumulation steps define a batch."""
        deepspeed = import_deepspeed()
        model = model.to(self.device)
        if isinstance(model, deepspeed.PipelineEngine):
            self._use_pipeline_parallel = True
        if not self.models:
            self._train_micro_batch_size_per_gpu = int(model.train_micro_batch_size_per_gpu())
            self._num_micro_batches_per_slot = int(model.gradient_accumulation_steps())
        elif model.train_micro_batch_size_per_gpu() != self._train_micro_batch_size_per_gpu:
            logger.warning(
                "model engine %d has another micro batch size than the first: the batch "
                "counts follow the first engine",
                len(self.models) + 1,
            )
        self.models.append(model)
        return model

    def set_mpu(self, mpu: ModelParallelUnit) -> None:
        if not self.models:
            raise RuntimeError("call wrap_model_engine before set_mpu")
        dp_size = mpu.data_parallel_world_size
        if dp_size != self.distributed.size or not mpu.should_build_data_loader:
            raise NotImplementedError(
                "set_mpu: model parallelism outside DeepSpeed's own (a data-parallel world "
                f"of {dp_size} in {self.distributed.size} workers, or "
                "workers without data loaders) is not supported by detlab's DeepSpeedTrial"
            )
        self._mpu = mpu

    def disable_auto_grad_accumulation(self) -> None:
        """train_batch is called once per batch and consumes the micro batches itself."""
        self._manual_grad_accumulation = True

    def disable_dataset_reproducibility_checks(self) -> None:
        """Any torch DataLoader is accepted (it always is here; the call is kept for Determined's
        scripts)."""
        self._data_repro_checks_disabled = True

    @property
    def mpu(self) -> ModelParallelUnit:
        return self._mpu

    @property
    def use_pipeline_parallel(self) -> bool:
        return self._use_pipeline_parallel

    @property
    def train_micro_batch_size_per_gpu(self) -> int:
        if self._train_micro_batch_size_per_gpu is None:
            raise RuntimeError("call wrap_model_engine before train_micro_batch_size_per_gpu")
        return self._train_micro_batch_size_per_gpu

    @property
    def num_micro_batches_per_slot(self) -> int:
        if self._num_micro_batches_per_slot is None:
            raise RuntimeError("call wrap_model_engine before num_micro_batches_per_slot")
        return self._num_micro_batches_per_slot

    # -- PyTorchTrial's wrappers: DeepSpeed owns these ---------------------------------------
    def _refuse(self, what: str) -> Any:
        raise RuntimeError(
            f"DeepSpeedTrialContext has no {what}: pass the model, optimizer and LR scheduler "
            "to deepspeed.initialize and register the engine with wrap_model_engine"
        )

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return self._refuse("wrap_model")

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, **_: Any) -> torch.optim.Optimizer:
        return self._refuse("wrap_optimizer")

    def wrap_lr_scheduler(self, *args: Any, **kwargs: Any) -> Any:
        return self._refuse("wrap_lr_scheduler")

    def wrap_scaler(self, scaler: Any) -> Any:
        return self._refuse("wrap_scaler (mixed precision is in the DeepSpeed config)")

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self._refuse("backward (call engine.backward(loss))")

    def step_optimizer(self, *args: Any, **kwargs: Any) -> None:
        self._refuse("step_optimizer (call engine.step())")
