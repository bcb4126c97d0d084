"""Determined 0.38's `pytorch.MetricReducer` and `pytorch.PyTorchCallback`.

- A `MetricReducer` registered with `context.wrap_reducer(reducer, name=...)` computes a
  validation metric that is not a per-batch average (AUC, F1, ...): the loop calls `reset()`
  before each validation, the trial's `evaluate_batch` feeds it (`reducer.update(...)`, any
  method the user defines), then every worker's `per_slot_reduce()` result is gathered and the
  chief's `cross_slot_reduce(per_slot_metrics)` gives the metric (a dict merges into the
  validation metrics, any other value is stored under `name`).
- `PyTorchCallback`s returned by the trial's `build_callbacks()` (a dict of name -> callback)
  are called at the points below; their `state_dict()` goes into checkpoints.
"""

from __future__ import annotations

from typing import Any


class MetricReducer:
    """Subclass and define `reset`, `per_slot_reduce` and `cross_slot_reduce`."""

    def reset(self) -> None:
        raise NotImplementedError("MetricReducer subclasses must define reset()")

    def per_slot_reduce(self) -> Any:
        raise NotImplementedError("MetricReducer subclasses must define per_slot_reduce()")

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        raise NotImplementedError("MetricReducer subclasses must define cross_slot_reduce()")


class PyTorchCallback:
    """Override any hook; every one is a no-op by default."""

    def on_training_start(self) -> None:
        """Training starts (after a restore from a checkpoint, if any)."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """The first batch of epoch `epoch_idx` is about to be trained."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """The last batch of epoch `epoch_idx` was trained."""

    def on_training_workload_end(
        self, avg_metrics: dict[str, Any], batch_metrics: dict[str, Any]
    ) -> None:
        """Training metrics were reported (chief: the averages; others: empty dicts)."""

    def on_validation_start(self) -> None:
        """A validation pass starts."""

    def on_validation_epoch_start(self) -> None:
        """Determined's alias of `on_validation_start`, called right after it."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """A validation pass ended with `metrics` (on every worker)."""

    def on_validation_epoch_end(self, outputs: list[Any]) -> None:
        """Called after `on_validation_end` (outputs are not kept: an empty list)."""

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        """The chief is about to save `checkpoint` (the dict written to state.pt)."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """Checkpoint `uuid` was stored and registered (chief)."""

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        """A checkpoint (the dict read from state.pt) is about to be restored."""

    def on_trial_startup(self, first_batch_idx: int, latest_checkpoint: str | None) -> None:
        """The trial is built; training resumes at `first_batch_idx`."""

    def on_trial_shutdown(self) -> None:
        """Training is over (completed, preempted or stopped)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


class _Reducer:
    """A reducer registered with `context.wrap_reducer`."""

    def __init__(
        self, reducer: Any, name: str | None, for_training: bool, for_validation: bool
    ) -> None:
        self.reducer = reducer
        self.name = name
        self.for_training = for_training
        self.for_validation = for_validation

    def reset(self) -> None:
        self.reducer.reset()

    def merge_into(self, metrics: dict[str, Any], parts: list[Any], is_chief: bool) -> None:
        if not is_chief:
            return
        value = self.reducer.cross_slot_reduce(parts)
        if isinstance(value, dict):
            metrics.update({str(k): _scalar(v) for k, v in value.items()})
        else:
            if self.name is None:
                raise ValueError(
                    "a MetricReducer whose cross_slot_reduce() returns a single value needs "
                    "a name: context.wrap_reducer(reducer, name='my_metric')"
                )
            metrics[self.name] = _scalar(value)


def _scalar(v: Any) -> Any:
    item = getattr(v, "item", None)
    return float(item()) if callable(item) else v
