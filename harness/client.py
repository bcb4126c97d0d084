"""Determined's Python SDK shape (`determined.experimental.client`) over detlab's REST API.

    from harness.experimental import client   # on a cluster: from determined.experimental ...
    client.login(master="http://host:8080", user="admin", password="...")
    exp = client.create_experiment(config="const.yaml", model_dir=".")
    state = exp.wait()                                   # ExperimentState.COMPLETED
    ckpt = exp.top_checkpoint()                          # best by the searcher metric
    path = ckpt.download()
    for m in client.get_trial(1).iter_metrics("validation"): print(m.steps_completed, m.metrics)

The model registry as in Determined's SDK:

    client.get_model("digits").get_version(3).checkpoint.download("./digits-v3")
    client.get_model("digits").get_version("production")   # by alias

Without `login`, the first call logs in from `DET_MASTER` + `DET_USER`/`DET_PASSWORD` (or the
token `det user login` cached); inside a trial it uses the trial's session.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.api import Session, auth
from harness.api.client import Client

DEFAULT_MASTER = "http://127.0.0.1:8080"


class ExperimentState(enum.Enum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


TrialState = ExperimentState
_TERMINAL = {ExperimentState.COMPLETED, ExperimentState.CANCELED, ExperimentState.ERROR}


@dataclass(frozen=True)
class TrialMetrics:
    trial_id: int
    steps_completed: int
    end_time: str | None
    metrics: dict[str, Any]
    group: str


class Checkpoint:
    def __init__(self, session: Client, raw: dict[str, Any]) -> None:
        self._client = session
        self._raw = raw
        self.uuid: str = raw["uuid"]
        self.trial_id: int | None = raw.get("trial_id")
        self.metadata: dict[str, Any] = dict(raw.get("metadata") or {})
        self.steps_completed: int | None = raw.get("steps_completed")
        self.state: str | None = raw.get("state")
        self.resources: dict[str, int] = dict(raw.get("resources") or {})

    def download(
        self, path: str | os.PathLike[str] | None = None, *, via_master: bool = False
    ) -> str:
        """Fetch the files into `path` (default `./checkpoints/<uuid>`): straight from the
        storage when this machine reaches it, else through the master. Returns the path."""
        from harness.storage.fetch import download

        dest = Path(path) if path is not None else Path("checkpoints") / self.uuid
        download(self._client, self.uuid, dest, via_master=via_master)
        return str(dest)

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
        after: int | None = None
        while True:  # pages of 10000, in step order
            page = self._client.trial_metrics(self.id, group=group, after_steps=after, limit=10_000)
            for m in page:
                yield TrialMetrics(
                    self.id, m["steps_completed"], m.get("reported_at"), m["metrics"], m["group"]
                )
            if len(page) < 10_000:
                return
            after = page[-1]["steps_completed"]

    def logs(self, follow: bool = False) -> Iterator[str]:
        if follow:
            for entry in self._client.follow_trial_logs(self.id):
                yield entry["line"]
            return
        after = 0
        while True:
            page = self._client.trial_logs(self.id, after=after, limit=10_000)["logs"]
            yield from (e["line"] for e in page)
            if len(page) < 10_000:
                return
            after = int(page[-1]["seq"])

    def list_checkpoints(self) -> list[Checkpoint]:
        return [Checkpoint(self._client, c) for c in self._client.list_trial_checkpoints(self.id)]

    def top_checkpoint(self) -> Checkpoint | None:
        ckpts = self.list_checkpoints()
        return max(ckpts, key=lambda c: c.steps_completed or 0) if ckpts else None

    def kill(self) -> None:
        self._client.kill_experiment(self.experiment_id)


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

    def wait(self, interval: float = 5.0) -> ExperimentState:
        """Block until the experiment is COMPLETED, CANCELED or ERROR; returns that state."""
        while True:
            self.reload()
            if self.state in _TERMINAL:
                return self.state
            time.sleep(interval)

    def await_first_trial(self, interval: float = 0.25) -> Trial:
        while True:
            trials = self._client.list_experiment_trials(self.id)
            if trials:
                return Trial(self._client, trials[0]["id"])
            time.sleep(interval)

    def list_trials(self) -> list[Trial]:
        return [Trial(self._client, t["id"]) for t in self._client.list_experiment_trials(self.id)]

    get_trials = list_trials

    def list_checkpoints(self) -> list[Checkpoint]:
        raw = self._client.list_checkpoints(experiment_id=self.id)
        return [Checkpoint(self._client, c) for c in raw]

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
        for c in self.list_checkpoints():
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

    def pause(self) -> None:
        self._client.pause_experiment(self.id)

    def activate(self) -> None:
        self._client.activate_experiment(self.id)

    def cancel(self) -> None:
        self._client.cancel_experiment(self.id)

    def kill(self) -> None:
        self._client.kill_experiment(self.id)


class ModelVersion:
    """Version N of a registered model, pointing to a checkpoint, with its lineage."""

    def __init__(self, session: Client, model_name: str, raw: dict[str, Any]) -> None:
        self._client = session
        self._raw = raw
        self.model_name = model_name
        self.version: int = int(raw["version"])
        self.comment: str | None = raw.get("comment")

    @property
    def checkpoint(self) -> Checkpoint:
        ckpt = dict(self._raw.get("checkpoint") or {})
        ckpt.setdefault("uuid", self._raw.get("checkpoint_uuid", ""))
        return Checkpoint(self._client, ckpt)

    @property
    def lineage(self) -> dict[str, Any]:
        """Trial, experiment, hparams and validation metrics of the version's checkpoint."""
        ckpt = self._raw.get("checkpoint") or {}
        return {
            "trial_id": ckpt.get("trial_id"),
            "experiment_id": ckpt.get("experiment_id"),
            **(ckpt.get("lineage") or {}),
        }

    def __repr__(self) -> str:
        return f"ModelVersion({self.model_name!r}, version={self.version})"


class Model:
    """A registered model (Determined's `client.Model`)."""

    def __init__(self, session: Client, raw: dict[str, Any]) -> None:
        self._client = session
        self._raw = raw
        self.name: str = raw["name"]
        self.description: str | None = raw.get("description")

    def get_version(self, version: int | str = -1) -> ModelVersion:
        """Version `n`, an alias name, or -1 for the newest (as in Determined)."""
        if version == -1:
            versions = self._client.list_model_versions(self.name)
            if not versions:
                raise LookupError(f"model {self.name!r} has no versions")
            raw = versions[-1]
        else:
            raw = self._client.get_model_version(self.name, version)
        return ModelVersion(self._client, self.name, raw)

    def get_versions(self) -> list[ModelVersion]:
        return [
            ModelVersion(self._client, self.name, r)
            for r in self._client.list_model_versions(self.name)
        ]

    def register_version(self, checkpoint_uuid: str, **fields: Any) -> ModelVersion:
        raw = self._client.register_model_version(self.name, checkpoint_uuid, **fields)
        return ModelVersion(self._client, self.name, raw)

    def set_alias(self, alias: str, version: int) -> None:
        self._client.set_model_alias(self.name, alias, version)

    def __repr__(self) -> str:
        return f"Model({self.name!r})"


class Determined:
    """One connection to a master (Determined's `client.Determined`)."""

    def __init__(
        self, master: str | None = None, user: str | None = None, password: str | None = None
    ) -> None:
        master = master or os.environ.get("DET_MASTER") or DEFAULT_MASTER
        user = user or os.environ.get("DET_USER")
        password = password if password is not None else os.environ.get("DET_PASSWORD")
        token = os.environ.get("DET_SESSION_TOKEN") if not user else None
        if user and password is not None:
            session = auth.login(master, user, password, cache=False)
        elif token:
            session = Session(master, token)
        else:
            session = auth.login_session(master)
        self._client = Client(session)

    @property
    def api(self) -> Client:
        """The REST client under this connection (one per master)."""
        return self._client

    def create_experiment(
        self,
        config: str | os.PathLike[str] | dict[str, Any],
        model_dir: str | os.PathLike[str] | None = None,
        activate: bool = True,
        **_: Any,
    ) -> Experiment:
        """`config`: a dict, a path to a YAML file or YAML text; `model_dir`: the files to ship."""
        from harness.cli._modeldef import build_model_def

        if isinstance(config, dict):
            import yaml

            text = yaml.safe_dump(config, sort_keys=False)
        elif isinstance(config, os.PathLike) or (
            "\n" not in str(config) and Path(str(config)).is_file()
        ):
            text = Path(config).read_text()
        else:
            text = str(config)
        model_def = build_model_def(Path(model_dir)) if model_dir is not None else None
        raw = self._client.create_experiment(text, model_def, activate=activate)
        return Experiment(self._client, int(raw["id"]))

    def get_experiment(self, experiment_id: int) -> Experiment:
        return Experiment(self._client, experiment_id)

    def list_experiments(self, name: str | None = None) -> list[Experiment]:
        out = []
        for e in self._client.iter_experiments():
            if name is None or e.get("name") == name:
                out.append(Experiment(self._client, int(e["id"])))
        return out

    def get_trial(self, trial_id: int) -> Trial:
        return Trial(self._client, trial_id)

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        return Checkpoint(self._client, self._client.get_checkpoint(uuid))

    def get_model(self, name: str) -> Model:
        return Model(self._client, self._client.get_model(name))

    def create_model(self, name: str, description: str | None = None, **fields: Any) -> Model:
        return Model(
            self._client, self._client.create_model(name, description=description, **fields)
        )

    def get_models(self) -> list[Model]:
        return [Model(self._client, m) for m in self._client.list_models()]


_default: Determined | None = None


def login(
    master: str | None = None, user: str | None = None, password: str | None = None, **_: Any
) -> Determined:
    """Connect the module-level functions to `master` (defaults: DET_MASTER, DET_USER, ...)."""
    global _default
    _default = Determined(master, user, password)
    return _default


def _d() -> Determined:
    return _default or login()


def create_experiment(
    config: str | os.PathLike[str] | dict[str, Any],
    model_dir: str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> Experiment:
    return _d().create_experiment(config, model_dir, **kwargs)


def get_experiment(experiment_id: int) -> Experiment:
    return _d().get_experiment(experiment_id)


def list_experiments(name: str | None = None) -> list[Experiment]:
    return _d().list_experiments(name)


def get_trial(trial_id: int) -> Trial:
    return _d().get_trial(trial_id)


def get_checkpoint(uuid: str) -> Checkpoint:
    return _d().get_checkpoint(uuid)


def get_model(name: str) -> Model:
    return _d().get_model(name)


def create_model(name: str, description: str | None = None, **fields: Any) -> Model:
    return _d().create_model(name, description, **fields)


def get_models() -> list[Model]:
    return _d().get_models()
