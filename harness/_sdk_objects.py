"""The SDK's experiment, trial, checkpoint and metrics objects (Determined 0.38's
`determined.experimental.client` classes), over detlab's REST client. Public through
`harness.client`."""

from __future__ import annotations

import datetime
import enum
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detlab.states import TERMINAL_STATES, State
from harness.api.client import Client

# Determined's names for the one experiment/trial state enum the master defines its states with.
ExperimentState = State
TrialState = State
TERMINAL = TERMINAL_STATES


class OrderBy(enum.Enum):
    """Determined's sort order for the list calls."""

    ASCENDING = "ASC"
    ASC = "ASC"
    DESCENDING = "DESC"
    DESC = "DESC"


class CheckpointSortBy(enum.Enum):
    """Determined's checkpoint attributes to sort by (`Trial.list_checkpoints(sort_by=)`)."""

    UUID = "SORT_BY_UUID"
    TRIAL_ID = "SORT_BY_TRIAL_ID"
    BATCH_NUMBER = "SORT_BY_BATCH_NUMBER"
    END_TIME = "SORT_BY_END_TIME"
    STATE = "SORT_BY_STATE"
    SEARCHER_METRIC = "SORT_BY_SEARCHER_METRIC"


@dataclass(frozen=True)
class TrialMetrics:
    """One report. `end_time` is when the master received it; `trial_run_id` is not tracked
    by detlab (None)."""

    trial_id: int
    steps_completed: int
    end_time: datetime.datetime | None
    metrics: dict[str, Any]
    group: str
    trial_run_id: int | None = None
    batch_metrics: list[dict[str, Any]] | None = None

    @property
    def total_batches(self) -> int:  # Determined's older name
        return self.steps_completed

    @classmethod
    def from_report(cls, trial_id: int, raw: dict[str, Any]) -> TrialMetrics:
        when = raw.get("reported_at")
        return cls(
            trial_id,
            int(raw["steps_completed"]),
            datetime.datetime.fromisoformat(when) if when else None,
            dict(raw.get("metrics") or {}),
            str(raw.get("group")),
        )


class TrainingMetrics(TrialMetrics):
    """A training report (Determined keeps this subclass for `stream_training_metrics`)."""


class ValidationMetrics(TrialMetrics):
    """A validation report (for `stream_validation_metrics`)."""


PAGE = 10_000


def iter_trial_metrics(client: Client, trial_id: int, group: str) -> Iterator[TrialMetrics]:
    """Every report of `group`, in step order, a page at a time."""
    kind = {"training": TrainingMetrics, "validation": ValidationMetrics}.get(group, TrialMetrics)
    after: int | None = None
    while True:
        page = client.trial_metrics(trial_id, group=group, after_steps=after, limit=PAGE)
        for m in page:
            yield kind.from_report(trial_id, m)
        if len(page) < PAGE:
            return
        after = page[-1]["steps_completed"]


class Checkpoint:
    def __init__(self, session: Client, raw: dict[str, Any]) -> None:
        self._client = session
        self._set(raw)

    def _set(self, raw: dict[str, Any]) -> None:
        self._raw = raw
        self.uuid: str = raw["uuid"]
        self.trial_id: int | None = raw.get("trial_id")
        self.metadata: dict[str, Any] = dict(raw.get("metadata") or {})
        self.steps_completed: int | None = raw.get("steps_completed")
        self.state: str | None = raw.get("state")
        self.resources: dict[str, int] = dict(raw.get("resources") or {})

    def reload(self) -> None:
        self._set(self._client.get_checkpoint(self.uuid))

    def download(
        self,
        path: str | os.PathLike[str] | None = None,
        mode: Any = None,
        *,
        via_master: bool = False,
    ) -> str:
        """Fetch the files into `path` (default `./checkpoints/<uuid>`): straight from the
        storage when this machine reaches it, else through the master. Returns the path.
        `mode` (Determined's DownloadMode) is accepted; detlab picks the way itself."""
        from harness.storage.fetch import download

        dest = Path(path) if path is not None else Path("checkpoints") / self.uuid
        download(self._client, self.uuid, dest, via_master=via_master)
        return str(dest)

    def add_metadata(self, metadata: dict[str, Any]) -> None:
        """Merge `metadata` into the checkpoint's (top-level keys replaced), on the master."""
        self._set(self._client.patch_checkpoint_metadata(self.uuid, add=metadata))

    def remove_metadata(self, keys: list[str]) -> None:
        self._set(self._client.patch_checkpoint_metadata(self.uuid, remove=keys))

    def delete(self) -> None:
        """Delete the checkpoint (its files go with the master's GC; a registered one is
        refused)."""
        self._client.delete_checkpoints([self.uuid])
        self.reload()

    def write_metadata_file(self, path: str) -> None:
        """The checkpoint's metadata as JSON at `path` (Determined writes metadata.json)."""
        import json

        Path(path).write_text(json.dumps(self.metadata, indent=2, sort_keys=True))

    def get_metrics(self, group: str | None = None) -> Iterator[TrialMetrics]:
        """The reports of its trial up to the checkpoint's step."""
        if self.trial_id is None:
            return
        for g in [group] if group else ["training", "validation"]:
            for m in iter_trial_metrics(self._client, self.trial_id, g):
                if m.steps_completed <= (self.steps_completed or 0):
                    yield m

    def __repr__(self) -> str:
        return f"Checkpoint(uuid={self.uuid!r}, trial_id={self.trial_id})"


class Trial:
    def __init__(self, session: Client, trial_id: int) -> None:
        self._client = session
        self.id = trial_id
        self._raw: dict[str, Any] = {}
        self.reload()

    def reload(self) -> None:
        self._raw = self._client.get_trial(self.id)

    @property
    def experiment_id(self) -> int:
        return int(self._raw["experiment_id"])

    @property
    def hparams(self) -> dict[str, Any]:
        return dict(self._raw.get("hparams") or {})

    @property
    def state(self) -> ExperimentState:
        return ExperimentState(self._raw["state"])

    @property
    def summary_metrics(self) -> dict[str, Any]:
        return {"best_validation": self._raw.get("best_validation")}

    def iter_metrics(self, group: str) -> Iterator[TrialMetrics]:
        return iter_trial_metrics(self._client, self.id, group)

    stream_metrics = iter_metrics  # Determined's deprecated name

    def stream_training_metrics(self) -> Iterator[TrialMetrics]:
        return iter_trial_metrics(self._client, self.id, "training")

    def stream_validation_metrics(self) -> Iterator[TrialMetrics]:
        return iter_trial_metrics(self._client, self.id, "validation")

    def iter_logs(self, follow: bool = False, **_: Any) -> Iterator[str]:
        if follow:
            for entry in self._client.follow_trial_logs(self.id):
                yield entry["line"]
            return
        after = 0
        while True:
            page = self._client.trial_logs(self.id, after=after, limit=PAGE)["logs"]
            yield from (e["line"] for e in page)
            if len(page) < PAGE:
                return
            after = int(page[-1]["seq"])

    logs = iter_logs

    def list_checkpoints(
        self,
        sort_by: str | CheckpointSortBy | None = None,
        order_by: OrderBy | None = None,
        max_results: int | None = None,
    ) -> list[Checkpoint]:
        """Determined's call: by default best first by the searcher metric reported at each
        checkpoint's step; `sort_by` a validation metric's name or a `CheckpointSortBy`
        attribute, with `order_by` (both or neither)."""
        from harness._ckpt_io import trial_checkpoints

        if (sort_by is None) != (order_by is None):
            raise AssertionError("sort_by and order_by must be either both set, or neither.")
        if sort_by is not None and not isinstance(sort_by, str | CheckpointSortBy):
            raise ValueError("sort_by must be of type CheckpointSortBy or str")
        ascending = None if order_by is None else order_by.value == "ASC"
        attribute = sort_by.value if isinstance(sort_by, CheckpointSortBy) else None
        metric = sort_by if isinstance(sort_by, str) else None
        raw = trial_checkpoints(
            self._client,
            self.experiment_id,
            self.id,
            metric=metric,
            attribute=attribute,
            ascending=ascending,
            limit=max_results,
        )
        return [Checkpoint(self._client, dict(c)) for c in raw]

    def get_checkpoints(
        self, sort_by: str | CheckpointSortBy | None = None, order_by: OrderBy | None = None
    ) -> list[Checkpoint]:
        """Deprecated in 0.38 (FutureWarning): `list_checkpoints`."""
        _deprecated("Trial.get_checkpoints()", "Trial.list_checkpoints()")
        return self.list_checkpoints(sort_by, order_by)

    def top_checkpoint(
        self, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> Checkpoint:
        """Deprecated in 0.38 (FutureWarning): the checkpoint with the best validation metric
        (`sort_by`, default the searcher metric)."""
        _deprecated("Trial.top_checkpoint()", "Trial.list_checkpoints(..., max_results=1)")
        return self._best(sort_by, smaller_is_better)

    def select_checkpoint(
        self,
        latest: bool = False,
        best: bool = False,
        uuid: str | None = None,
        sort_by: str | None = None,
        smaller_is_better: bool | None = None,
    ) -> Checkpoint:
        """Deprecated in 0.38 (FutureWarning): exactly one of `latest`, `best` (by `sort_by`
        and `smaller_is_better`, default the searcher's) or `uuid`."""
        _deprecated("Trial.select_checkpoint()", "Trial.list_checkpoints()")
        if sum([int(latest), int(best), int(uuid is not None)]) != 1:
            raise AssertionError("Exactly one of latest, best, or uuid must be set")
        if (sort_by is None) != (smaller_is_better is None):
            raise AssertionError("sort_by and smaller_is_better must be set together")
        if sort_by is not None and not best:
            raise AssertionError(
                "`sort_by` and `smaller_is_better` parameters can only be used with `best`"
            )
        if uuid is not None:
            return Checkpoint(self._client, self._client.get_checkpoint(uuid))
        if latest:
            found = self.list_checkpoints(CheckpointSortBy.BATCH_NUMBER, OrderBy.DESC, 1)
            if not found:
                raise ValueError("No checkpoints found for criteria.")
            return found[0]
        return self._best(sort_by, smaller_is_better)

    def _best(self, sort_by: str | None, smaller_is_better: bool | None) -> Checkpoint:
        order = None
        if sort_by:
            order = OrderBy.ASC if smaller_is_better else OrderBy.DESC
        found = self.list_checkpoints(sort_by, order, 1)
        if not found:
            raise ValueError("No checkpoints found for criteria.")
        return found[0]

    def get_experiment(self) -> Experiment:
        return Experiment(self._client, self.experiment_id)

    def kill(self) -> None:
        """Kill this trial (only it: the experiment's other trials go on)."""
        self._client.kill_trial(self.id)


def _deprecated(call: str, instead: str) -> None:
    import warnings

    warnings.warn(
        f"{call} has been deprecated and will be removed in a future version. "
        f"Please call {instead} instead.",
        FutureWarning,
        stacklevel=3,
    )


class Experiment:
    def __init__(self, session: Client, experiment_id: int) -> None:
        self._client = session
        self.id = experiment_id
        self._raw: dict[str, Any] = {}
        self.reload()

    def reload(self) -> None:
        self._raw = self._client.get_experiment(self.id)

    @property
    def state(self) -> ExperimentState:
        return ExperimentState(self._raw["state"])

    @property
    def config(self) -> dict[str, Any]:
        return dict(self._raw.get("config") or {})

    @property
    def name(self) -> str:
        return str(self._raw.get("name"))

    @property
    def description(self) -> str | None:
        return self._raw.get("description")

    @property
    def labels(self) -> list[str]:
        return list(self._raw.get("labels") or [])

    @property
    def archived(self) -> bool:
        return bool(self._raw.get("archived"))

    def wait(self, interval: float = 5.0) -> ExperimentState:
        """Block until the experiment is COMPLETED, CANCELED or ERROR; returns that state."""
        while True:
            self.reload()
            if self.state in TERMINAL:
                return self.state
            time.sleep(interval)

    def await_first_trial(self, interval: float = 0.25) -> Trial:
        while True:
            trials = self._client.list_experiment_trials(self.id)
            if trials:
                return Trial(self._client, trials[0]["id"])
            time.sleep(interval)

    def list_trials(self, *_: Any, **__: Any) -> list[Trial]:
        return [Trial(self._client, t["id"]) for t in self._client.list_experiment_trials(self.id)]

    get_trials = list_trials

    def iter_trials(self, *_: Any, **__: Any) -> Iterable[Trial]:
        return iter(self.list_trials())

    def list_checkpoints(
        self,
        sort_by: Any = None,
        order_by: OrderBy | None = None,
        max_results: int | None = None,
    ) -> list[Checkpoint]:
        """Determined's call: sorted by a validation metric's value at each checkpoint
        (`sort_by`: a metric name; default the searcher metric, best first), newest first
        among those without one."""
        from harness._ckpt_io import ranked_checkpoints

        smaller = None if order_by is None else order_by.value == "ASC"
        name = sort_by if isinstance(sort_by, str) else None
        raw = ranked_checkpoints(
            self._client, self.id, sort_by=name, smaller_is_better=smaller, limit=max_results
        )
        return [Checkpoint(self._client, dict(c)) for c in raw]

    def top_n_checkpoints(
        self, limit: int, smaller_is_better: bool | None = None
    ) -> list[Checkpoint]:
        """The latest checkpoint of each trial, ordered by the trial's best validation."""
        self.reload()
        smaller = (
            self._raw.get("smaller_is_better", True)
            if smaller_is_better is None
            else smaller_is_better
        )
        best: dict[int, float] = {}
        for t in self._client.list_experiment_trials(self.id):
            if t.get("best_validation") is not None:
                best[t["id"]] = float(t["best_validation"])
        latest: dict[int, Checkpoint] = {}
        for raw in self._client.list_checkpoints(experiment_id=self.id):
            c = Checkpoint(self._client, raw)
            if c.trial_id in best:
                prev = latest.get(c.trial_id)
                if prev is None or (c.steps_completed or 0) > (prev.steps_completed or 0):
                    latest[c.trial_id] = c
        ranked = sorted(latest, key=lambda trial_id: best[trial_id], reverse=not smaller)
        return [latest[trial_id] for trial_id in ranked[:limit]]

    def top_checkpoint(self, smaller_is_better: bool | None = None) -> Checkpoint:
        top = self.top_n_checkpoints(1, smaller_is_better)
        if not top:
            raise ValueError(f"experiment {self.id} has no checkpoint of a validated trial")
        return top[0]

    def _patch(self, **changes: Any) -> None:
        self._raw = self._client.patch_experiment(self.id, **changes)

    def set_name(self, name: str) -> None:
        self._patch(name=name)

    def set_description(self, description: str) -> None:
        self._patch(description=description)

    def add_label(self, label: str) -> None:
        self.reload()
        if label not in self.labels:
            self._patch(labels=[*self.labels, label])

    def remove_label(self, label: str) -> None:
        self.reload()
        if label in self.labels:
            self._patch(labels=[x for x in self.labels if x != label])

    def set_labels(self, labels: Iterable[str]) -> None:
        self._patch(labels=sorted(set(labels)))

    def archive(self) -> None:
        self._patch(archived=True)

    def unarchive(self) -> None:
        self._patch(archived=False)

    def download_code(self, output_dir: str | None = None) -> str:
        """The model definition, unpacked into `output_dir` (default `./experiment_ID`)."""
        import io
        import tarfile

        dest = Path(output_dir or f"experiment_{self.id}")
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(self._client.get_model_def(self.id))) as tar:
            tar.extractall(dest, filter="data")
        return str(dest)

    def delete(self) -> None:
        self._client.delete_experiment(self.id)

    def delete_tensorboard_files(self) -> None:
        self._client.delete_tensorboard_files(self.id)

    def move_to_project(self, workspace_name: str, project_name: str) -> None:
        """detlab has one workspace and project: moving there is a no-op, anywhere else a
        LookupError naming it."""
        from harness._sdk_registry import get_workspace

        get_workspace(workspace_name).get_project(project_name)

    def pause(self) -> None:
        self._client.pause_experiment(self.id)

    def activate(self) -> None:
        self._client.activate_experiment(self.id)

    def cancel(self) -> None:
        self._client.cancel_experiment(self.id)

    def kill(self) -> None:
        self._client.kill_experiment(self.id)
