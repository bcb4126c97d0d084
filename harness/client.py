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

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from harness._sdk_objects import (
    Checkpoint,
    CheckpointSortBy,
    Experiment,
    ExperimentState,
    OrderBy,
    TrainingMetrics,
    Trial,
    TrialMetrics,
    TrialState,
    ValidationMetrics,
    iter_trial_metrics,
)
from harness._sdk_registry import (
    Model,
    ModelVersion,
    Project,
    User,
    Workspace,
)
from harness._sdk_registry import get_workspace as _workspace
from harness._sdk_registry import no_projects as _no_projects
from harness.api import Session, auth
from harness.api.client import Client

DEFAULT_MASTER = "http://127.0.0.1:8080"


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
        includes: Iterable[str | os.PathLike[str]] | None = None,
        project_id: int | None = None,
        template: str | None = None,
        activate: bool = True,
        **_: Any,
    ) -> Experiment:
        """`config`: a dict, a path to a YAML file or YAML text; `model_dir`: the files to ship,
        `includes`: more files or directories packed beside them (Determined's `-i`)."""
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
        if project_id not in (None, 1):
            raise LookupError(_no_projects(f"project {project_id}"))
        extra = [Path(p) for p in includes or []]
        model_def = (
            build_model_def(Path(model_dir) if model_dir is not None else None, includes=extra)
            if model_dir is not None or extra
            else None
        )
        body = self._client.submit_experiment(text, model_def, activate=activate, template=template)
        return Experiment(self._client, int(body["experiment"]["id"]))

    def get_experiment(self, experiment_id: int) -> Experiment:
        return Experiment(self._client, experiment_id)

    def list_experiments(
        self,
        sort_by: Any = None,
        order_by: OrderBy | None = None,
        experiment_ids: list[int] | None = None,
        labels: list[str] | None = None,
        users: list[str] | None = None,
        states: list[ExperimentState] | None = None,
        name: str | None = None,
        **_: Any,
    ) -> list[Experiment]:
        """Experiments matching every filter given (Determined's keyword filters), by id."""
        out = []
        for e in self._client.iter_experiments():
            if (
                (name is None or e.get("name") == name)
                and (experiment_ids is None or e["id"] in experiment_ids)
                and (labels is None or set(labels) <= set(e.get("labels") or []))
                and (users is None or e.get("owner") in users)
                and (states is None or e.get("state") in {s.value for s in states})
            ):
                out.append(Experiment(self._client, int(e["id"])))
        out.sort(key=lambda x: x.id, reverse=order_by is not None and order_by.value == "DESC")
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

    def list_models(
        self,
        sort_by: Any = None,
        order_by: OrderBy = OrderBy.ASCENDING,
        name: str | None = None,
        description: str | None = None,
        model_id: int | None = None,
        workspace_names: list[str] | None = None,
        workspace_ids: list[int] | None = None,
    ) -> list[Model]:
        """Registered models, by name (Determined's default sort); `name` and `description`
        match substrings, as in Determined."""
        for ws in workspace_names or []:
            _workspace(ws)  # refuses any but the default one
        if workspace_ids and set(workspace_ids) != {1}:
            raise LookupError(_no_projects(f"workspace ids {workspace_ids}"))
        out = [
            Model(self._client, m)
            for m in self._client.list_models()
            if (name is None or name in m["name"])
            and (description is None or description in (m.get("description") or ""))
            and (model_id is None or m.get("id") == model_id)
        ]
        out.sort(key=lambda m: m.name, reverse=order_by.value == "DESC")
        return out

    def get_models(self, *args: Any, **kwargs: Any) -> list[Model]:
        return self.list_models(*args, **kwargs)

    def whoami(self) -> User:
        return User.from_raw(self._client.me())

    def list_users(self, active: bool | None = None) -> list[User]:
        users = [User.from_raw(u) for u in self._client.list_users()]
        return [u for u in users if active is None or u.active == active]

    def get_user_by_name(self, user_name: str) -> User:
        for user in self.list_users():
            if user.username == user_name:
                return user
        raise LookupError(f"no user named {user_name!r}")

    def get_user_by_id(self, user_id: int) -> User:
        for user in self.list_users():
            if user.user_id == user_id:
                return user
        raise LookupError(f"no user with id {user_id}")

    def create_user(self, username: str, admin: bool, password: str | None = None) -> User:
        """A new user (admins only). detlab users need a password: None is refused."""
        if password is None:
            raise ValueError("detlab users log in with a password: pass password=")
        return User.from_raw(self._client.create_user(username, password, admin=admin))

    def get_model_by_id(self, model_id: int) -> Model:
        for model in self.list_models(model_id=model_id):
            return model
        raise LookupError(f"no model with id {model_id}")

    def get_model_labels(self) -> list[str]:
        """Every label used by a model, most used first (as Determined orders them)."""
        counts: dict[str, int] = {}
        for model in self.list_models():
            for label in model.labels:
                counts[label] = counts.get(label, 0) + 1
        return sorted(counts, key=lambda label: (-counts[label], label))

    def logout(self) -> None:
        self._client.logout()

    def get_session_username(self) -> str:
        return self.whoami().username

    def get_workspace(self, name: str) -> Workspace:
        return _workspace(name)

    def list_workspaces(self) -> list[Workspace]:
        return [Workspace()]

    def iter_trials_metrics(self, trial_ids: list[int], group: str) -> Iterator[TrialMetrics]:
        """Every report of `group` of each trial, trial by trial in step order."""
        for trial_id in trial_ids:
            yield from iter_trial_metrics(self._client, trial_id, group)

    stream_trials_metrics = iter_trials_metrics

    def stream_trials_training_metrics(self, trial_ids: list[int]) -> Iterator[TrialMetrics]:
        return self.iter_trials_metrics(trial_ids, "training")

    def stream_trials_validation_metrics(self, trial_ids: list[int]) -> Iterator[TrialMetrics]:
        return self.iter_trials_metrics(trial_ids, "validation")


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


def list_experiments(*args: Any, **kwargs: Any) -> list[Experiment]:
    return _d().list_experiments(*args, **kwargs)


def get_trial(trial_id: int) -> Trial:
    return _d().get_trial(trial_id)


def get_checkpoint(uuid: str) -> Checkpoint:
    return _d().get_checkpoint(uuid)


def get_model(name: str) -> Model:
    return _d().get_model(name)


def create_model(name: str, description: str | None = None, **fields: Any) -> Model:
    return _d().create_model(name, description, **fields)


def get_model_by_id(model_id: int) -> Model:
    return _d().get_model_by_id(model_id)


def get_model_labels() -> list[str]:
    return _d().get_model_labels()


def list_users(active: bool | None = None) -> list[User]:
    return _d().list_users(active)


def get_user_by_name(user_name: str) -> User:
    return _d().get_user_by_name(user_name)


def get_user_by_id(user_id: int) -> User:
    return _d().get_user_by_id(user_id)


def create_user(username: str, admin: bool, password: str | None = None) -> User:
    return _d().create_user(username, admin, password)


def logout() -> None:
    """Revoke the session of the module-level functions (the next call logs in again)."""
    global _default
    if _default is not None:
        _default.logout()
    _default = None


def get_models(*args: Any, **kwargs: Any) -> list[Model]:
    return _d().get_models(*args, **kwargs)


def list_models(*args: Any, **kwargs: Any) -> list[Model]:
    return _d().list_models(*args, **kwargs)


def whoami() -> User:
    return _d().whoami()


def get_session_username() -> str:
    return _d().get_session_username()


def get_workspace(name: str) -> Workspace:
    return _d().get_workspace(name)


def list_workspaces() -> list[Workspace]:
    return _d().list_workspaces()


def iter_trials_metrics(trial_ids: list[int], group: str) -> Iterator[TrialMetrics]:
    return _d().iter_trials_metrics(trial_ids, group)


stream_trials_metrics = iter_trials_metrics


def stream_trials_training_metrics(trial_ids: list[int]) -> Iterator[TrialMetrics]:
    return _d().stream_trials_training_metrics(trial_ids)


def stream_trials_validation_metrics(trial_ids: list[int]) -> Iterator[TrialMetrics]:
    return _d().stream_trials_validation_metrics(trial_ids)


__all__ = [
    "Checkpoint",
    "CheckpointSortBy",
    "Determined",
    "Experiment",
    "ExperimentState",
    "Model",
    "ModelVersion",
    "OrderBy",
    "Project",
    "TrainingMetrics",
    "Trial",
    "TrialMetrics",
    "TrialState",
    "User",
    "ValidationMetrics",
    "Workspace",
    "create_experiment",
    "create_model",
    "create_user",
    "get_checkpoint",
    "get_experiment",
    "get_model",
    "get_model_by_id",
    "get_model_labels",
    "get_models",
    "get_session_username",
    "get_trial",
    "get_user_by_id",
    "get_user_by_name",
    "get_workspace",
    "iter_trials_metrics",
    "list_experiments",
    "list_models",
    "list_users",
    "list_workspaces",
    "login",
    "logout",
    "stream_trials_metrics",
    "stream_trials_training_metrics",
    "stream_trials_validation_metrics",
    "whoami",
]
