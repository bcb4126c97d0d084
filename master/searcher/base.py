"""The searcher contract: a pure, deterministic state machine the master drives with events.

Events in (`on_*`), operations out. All randomness comes from one `random.Random` seeded by
the experiment seed, so the same config and seed give the same request ids, hyperparameters
and trial seeds, and `snapshot()`/`restore()` continue exactly where a searcher left off.
"""

from __future__ import annotations

import random
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from detlab.expconf import ExperimentConfig
from master.searcher.hparams import sample

TRIAL_SEED_MAX = 2**31 - 1


@dataclass(frozen=True)
class Create:
    """Create a trial with these hyperparameters and trial seed."""

    request_id: str
    hparams: dict
    seed: int


@dataclass(frozen=True)
class ValidateAfter:
    """Train the trial until its total length is `length` (max_length's unit), then validate."""

    request_id: str
    length: int


@dataclass(frozen=True)
class Close:
    """No more work for this trial once its current operation is done."""

    request_id: str


@dataclass(frozen=True)
class Shutdown:
    """The search is over; `failure` when it ended because it could not go on."""

    failure: bool = False


@dataclass(frozen=True)
class Stop:
    """Stop this trial now through the preemption signal, then close it (no more work).

    Used by the time_metric/max_time form of adaptive_asha: the searcher has already counted
    the trial as finished, so its exit (whatever length it reached) is a normal completion.
    """

    request_id: str


@dataclass(frozen=True)
class Resume:
    """Take up this ended (errored or canceled) trial again from its latest checkpoint, keeping
    its id and hyperparameters (`det experiment continue` of a search); a ValidateAfter follows.

    Emitted only when the trial has a free slot under `max_concurrent_trials`, so a continued
    search never runs more trials at once than a fresh one would.
    """

    request_id: str


Operation = Create | ValidateAfter | Close | Stop | Resume | Shutdown


class ExitedReason(StrEnum):
    """Why a trial ended before the searcher closed it."""

    INVALID_HP = "INVALID_HP"
    ERRORED = "ERRORED"
    USER_CANCELED = "USER_CANCELED"


def rng_state_to_json(rng: random.Random) -> list[Any]:
    """`random.Random.getstate()` as JSON-friendly lists."""
    version, internal, gauss_next = rng.getstate()
    return [version, list(internal), gauss_next]


def rng_from_json(state: list[Any]) -> random.Random:
    """Rebuild a `random.Random` from `rng_state_to_json` output."""
    rng = random.Random()
    version, internal, gauss_next = state
    rng.setstate((version, tuple(internal), gauss_next))
    return rng


def new_request_id(rng: random.Random) -> str:
    """A UUID-shaped request id drawn from the searcher's rng (deterministic per seed)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def operation_to_json(op: Operation) -> dict[str, Any]:
    """An operation as a JSON dict with a `type` tag (for logs, storage and previews)."""
    if isinstance(op, Create):
        return {
            "type": "create",
            "request_id": op.request_id,
            "hparams": op.hparams,
            "seed": op.seed,
        }
    if isinstance(op, ValidateAfter):
        return {"type": "validate_after", "request_id": op.request_id, "length": op.length}
    if isinstance(op, Close):
        return {"type": "close", "request_id": op.request_id}
    if isinstance(op, Stop):
        return {"type": "stop", "request_id": op.request_id}
    if isinstance(op, Resume):
        return {"type": "resume", "request_id": op.request_id}
    return {"type": "shutdown", "failure": op.failure}


def operation_from_json(data: dict[str, Any]) -> Operation:
    """Inverse of `operation_to_json`."""
    kind = data["type"]
    if kind == "create":
        return Create(data["request_id"], data["hparams"], data["seed"])
    if kind == "validate_after":
        return ValidateAfter(data["request_id"], data["length"])
    if kind == "close":
        return Close(data["request_id"])
    if kind == "stop":
        return Stop(data["request_id"])
    if kind == "resume":
        return Resume(data["request_id"])
    if kind == "shutdown":
        return Shutdown(bool(data.get("failure", False)))
    raise ValueError(f"unknown operation type {kind!r}")


class SearchMethod(ABC):
    """Base of every searcher. Subclasses keep all state JSON-friendly in `_state()`.

    Event handlers for unknown request ids return `[]`: stale events after a restart must
    not crash the master.
    """

    name: ClassVar[str]

    def __init__(self, config: ExperimentConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.rng = random.Random(seed)
        self.max_length = config.searcher.max_length_value()

    # -- events ---------------------------------------------------------------------------

    @abstractmethod
    def initial_operations(self) -> list[Operation]:
        """The operations that start the search."""

    def on_trial_created(self, request_id: str) -> list[Operation]:
        """The master created the trial's DB row; most searchers need nothing more."""
        return []

    @abstractmethod
    def on_validation_completed(
        self, request_id: str, metric: float, length: int
    ) -> list[Operation]:
        """The trial finished a ValidateAfter at `length` with the searcher metric `metric`."""

    def on_validation_metrics(self, request_id: str, metrics: dict, steps: int) -> list[Operation]:
        """Every validation report of a trial (all its metrics, at `steps` batches).

        Only the time_metric form of adaptive_asha acts on these (it may answer `Stop`).
        """
        return []

    def on_trial_closed(self, request_id: str) -> list[Operation]:
        """The trial ended (completed or closed)."""
        return []

    @abstractmethod
    def on_trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Operation]:
        """The trial ended without finishing its operations."""

    def on_continue(self, request_id: str) -> list[Operation]:
        """`det experiment continue`: the ended search takes up its one trial again and asks
        it to train to (the possibly new) max_length. Only `single` supports it."""
        raise NotImplementedError(f"{self.name} searches cannot be continued")

    def on_continue_search(
        self, request_ids: list[str], existing: set[str] | None = None
    ) -> list[Operation]:
        """`det experiment continue` of an ended grid or random search (no overrides): its
        unfinished trials (`request_ids`) train on and the trials it never created (absent
        from `existing`, the request ids that have a trial) are created. Only grid and random
        support it."""
        raise NotImplementedError(f"{self.name} searches cannot be continued")

    @abstractmethod
    def progress(self, lengths_completed: dict[str, float]) -> float:
        """Fraction (0..1) of the search's total work; lengths_completed: request id -> length."""

    # -- persistence ----------------------------------------------------------------------

    def snapshot(self) -> dict:
        """JSON-serialisable state, including the rng, for `restore`."""
        return {
            "searcher": self.name,
            "seed": self.seed,
            "rng": rng_state_to_json(self.rng),
            "state": self._state(),
        }

    def restore(self, state: dict) -> None:
        """Continue exactly where the snapshotted searcher was."""
        if state.get("searcher") != self.name:
            raise ValueError(
                f"snapshot is of searcher {state.get('searcher')!r}, not {self.name!r}"
            )
        self.seed = state["seed"]
        self.rng = rng_from_json(state["rng"])
        self._load_state(state["state"])

    @abstractmethod
    def _state(self) -> dict[str, Any]:
        """The subclass's own state as JSON-friendly values."""

    @abstractmethod
    def _load_state(self, state: dict[str, Any]) -> None:
        """Inverse of `_state`."""

    # -- helpers for subclasses -----------------------------------------------------------

    def _create(self, hparams: dict[str, Any] | None = None) -> Create:
        """A Create with a fresh request id, sampled hparams (unless given) and trial seed."""
        request_id = new_request_id(self.rng)
        if hparams is None:
            hparams = sample(self.config.hyperparameters, self.rng)
        return Create(request_id, hparams, self.rng.randint(0, TRIAL_SEED_MAX))
