"""`single`: one trial, trained to max_length; the search ends when it validates there."""

from __future__ import annotations

from typing import Any

from detlab.expconf import ExperimentConfig
from master.searcher.base import (
    Close,
    ExitedReason,
    Operation,
    SearchMethod,
    Shutdown,
    ValidateAfter,
)


class SingleSearch(SearchMethod):
    """Create one trial with sampled hyperparameters, validate it at max_length, shut down."""

    name = "single"

    def __init__(self, config: ExperimentConfig, seed: int) -> None:
        super().__init__(config, seed)
        self.request_id: str | None = None
        self.completed = False  # the trial validated at max_length
        self.shut_down = False  # Shutdown was emitted

    def initial_operations(self) -> list[Operation]:
        if self.request_id is not None:
            return []
        create = self._create()
        self.request_id = create.request_id
        return [create, ValidateAfter(create.request_id, self.max_length)]

    def on_validation_completed(
        self, request_id: str, metric: float, length: int
    ) -> list[Operation]:
        if request_id != self.request_id or self.completed or length < self.max_length:
            return []
        self.completed = True
        return [Close(request_id), *self._shutdown(failure=False)]

    def on_trial_closed(self, request_id: str) -> list[Operation]:
        # Closed without reaching max_length (e.g. killed): the only trial is gone.
        if request_id != self.request_id:
            return []
        return self._shutdown(failure=not self.completed)

    def on_trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Operation]:
        if request_id != self.request_id or self.completed:
            return []
        return self._shutdown(failure=True)

    def on_continue(self, request_id: str) -> list[Operation]:
        # The same trial trains again, from its latest checkpoint, to this searcher's max_length
        # (read from the continued config); the search ends when it validates there.
        if request_id != self.request_id:
            return []
        self.completed = False
        self.shut_down = False
        return [ValidateAfter(request_id, self.max_length)]

    def progress(self, lengths_completed: dict[str, float]) -> float:
        if self.completed:
            return 1.0
        if self.request_id is None:
            return 0.0
        done = float(lengths_completed.get(self.request_id, 0.0))
        return max(0.0, min(1.0, done / self.max_length))

    def _shutdown(self, *, failure: bool) -> list[Operation]:
        if self.shut_down:
            return []
        self.shut_down = True
        return [Shutdown(failure=failure)]

    def _state(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "completed": self.completed,
            "shut_down": self.shut_down,
        }

    def _load_state(self, state: dict[str, Any]) -> None:
        self.request_id = state["request_id"]
        self.completed = bool(state["completed"])
        self.shut_down = bool(state["shut_down"])
