"""The SDK's registry, user and workspace objects (Determined 0.38's `Model`, `ModelVersion`,
`User`, `Workspace`, `Project`). Public through `harness.client`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness._sdk_objects import Checkpoint, OrderBy
from harness.api.client import Client

# detlab has no workspaces or projects: everything lives in Determined's defaults.
DEFAULT_WORKSPACE = "Uncategorized"
DEFAULT_PROJECT = "Uncategorized"


class ModelVersion:
    """Version N of a registered model, pointing to a checkpoint, with its lineage."""

    def __init__(self, session: Client, model_name: str, raw: dict[str, Any]) -> None:
        self._client = session
        self._raw = raw
        self.model_name = model_name
        self.version: int = int(raw["version"])
        self.model_version = self.version  # Determined's attribute name
        self.name: str | None = raw.get("name")
        self.comment: str | None = raw.get("comment")
        self.notes: str | None = raw.get("notes")
        self.metadata: dict[str, Any] = dict(raw.get("metadata") or {})

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
        self._set(raw)

    def _set(self, raw: dict[str, Any]) -> None:
        self._raw = raw
        self.name: str = raw["name"]
        self.model_id: int | None = raw.get("id")
        self.description: str | None = raw.get("description")
        self.notes: str | None = raw.get("notes")
        self.metadata: dict[str, Any] = dict(raw.get("metadata") or {})
        self.labels: list[str] = list(raw.get("labels") or [])

    def reload(self) -> None:
        self._set(self._client.get_model(self.name))

    def _patch(self, **fields: Any) -> None:
        self._set(self._client.patch_model(self.name, **fields))

    def set_name(self, name: str) -> None:
        self._patch(name=name)

    def set_notes(self, notes: str) -> None:
        self._patch(notes=notes)

    def set_labels(self, labels: list[str]) -> None:
        self._patch(labels=list(labels))

    def add_metadata(self, metadata: dict[str, Any]) -> None:
        """Top-level keys of `metadata` replace the model's (Determined's merge)."""
        self._patch(metadata=metadata)

    def remove_metadata(self, keys: list[str]) -> None:
        self._patch(remove_metadata=list(keys))

    def move_to_workspace(self, workspace_name: str) -> None:
        get_workspace(workspace_name)  # refuses any but the one workspace: nothing to move

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

    def list_versions(self, order_by: OrderBy = OrderBy.DESC) -> list[ModelVersion]:
        """Every version, newest first by default (Determined's order)."""
        out = [
            ModelVersion(self._client, self.name, r)
            for r in self._client.list_model_versions(self.name)
        ]
        out.sort(key=lambda v: v.version, reverse=order_by.value == "DESC")
        return out

    def get_versions(self, order_by: OrderBy = OrderBy.DESC) -> list[ModelVersion]:
        return self.list_versions(order_by)

    def register_version(self, checkpoint_uuid: str, **fields: Any) -> ModelVersion:
        raw = self._client.register_model_version(self.name, checkpoint_uuid, **fields)
        return ModelVersion(self._client, self.name, raw)

    def set_alias(self, alias: str, version: int) -> None:
        self._client.set_model_alias(self.name, alias, version)

    def set_description(self, description: str) -> None:
        self._patch(description=description)

    def archive(self) -> None:
        self._client.archive_model(self.name, True)

    def unarchive(self) -> None:
        self._client.archive_model(self.name, False)

    def delete(self) -> None:
        self._client.delete_model(self.name)

    def __repr__(self) -> str:
        return f"Model({self.name!r})"


@dataclass
class User:
    """Determined's `client.User` (detlab users have no display names)."""

    user_id: int
    username: str
    admin: bool
    active: bool
    display_name: str | None = None

    @classmethod
    def from_raw(cls, raw: dict[str, Any]) -> User:
        return cls(int(raw["id"]), str(raw["username"]), bool(raw["admin"]), bool(raw["active"]))


@dataclass
class Project:
    name: str = DEFAULT_PROJECT
    id: int = 1
    workspace_id: int = 1


@dataclass
class Workspace:
    """detlab has one workspace, Determined's default `Uncategorized`, with one project."""

    name: str = DEFAULT_WORKSPACE
    id: int = 1

    def list_projects(self) -> list[Project]:
        return [Project()]

    def get_project(self, project_name: str) -> Project:
        if project_name != DEFAULT_PROJECT:
            raise LookupError(no_projects(f"project {project_name!r}"))
        return Project()


def no_projects(what: str) -> str:
    return (
        f"{what} not found: detlab has no workspaces or projects; every experiment and model "
        f"is in workspace {DEFAULT_WORKSPACE!r}, project {DEFAULT_PROJECT!r}"
    )


def get_workspace(name: str) -> Workspace:
    if name != DEFAULT_WORKSPACE:
        raise LookupError(no_projects(f"workspace {name!r}"))
    return Workspace()
