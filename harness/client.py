"""Determined-style Python SDK for the model registry and checkpoints.

from harness import client
client.login("http://master:8080", "alice", "pw")   # or DET_MASTER + DET_USER/DET_PASSWORD
client.get_model("digits").get_version(3).checkpoint.download("./digits-v3")
client.get_model("digits").get_version("production")  # by alias
client.get_checkpoint(uuid).download()
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.api import auth
from harness.api.client import Client

_client: Client | None = None


def login(
    master: str | None = None, user: str | None = None, password: str | None = None
) -> Client:
    """Log in (arguments, else DET_MASTER / DET_USER / DET_PASSWORD or a cached `det` login)."""
    global _client
    url = master or os.environ.get("DET_MASTER") or "http://127.0.0.1:8080"
    if user is not None and password is not None:
        _client = Client(auth.login(url, user, password, cache=False))
    else:
        _client = Client(auth.login_session(url))
    return _client


def _api() -> Client:
    return _client or login()


@dataclass
class Checkpoint:
    uuid: str
    record: dict[str, Any] = field(default_factory=dict, repr=False)
    _api: Client | None = field(default=None, repr=False)

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self.record.get("metadata") or {})

    @property
    def state(self) -> str | None:
        return self.record.get("state")

    def download(
        self, path: str | os.PathLike[str] | None = None, *, via_master: bool = False
    ) -> str:
        """Fetch the files into `path` (default `./checkpoints/<uuid>`); returns the path."""
        from harness.storage.fetch import download

        dest = Path(path) if path is not None else Path("checkpoints") / self.uuid
        download(self._api or _api(), self.uuid, dest, via_master=via_master)
        return str(dest)


@dataclass
class ModelVersion:
    model_name: str
    version: int
    record: dict[str, Any] = field(default_factory=dict, repr=False)
    _api: Client | None = field(default=None, repr=False)

    @property
    def checkpoint(self) -> Checkpoint:
        ckpt = self.record.get("checkpoint") or {}
        return Checkpoint(ckpt.get("uuid", ""), ckpt, self._api)

    @property
    def comment(self) -> str | None:
        return self.record.get("comment")

    @property
    def lineage(self) -> dict[str, Any]:
        """Trial, experiment, hparams and validation metrics of the version's checkpoint."""
        ckpt = self.record.get("checkpoint") or {}
        return {
            "trial_id": ckpt.get("trial_id"),
            "experiment_id": ckpt.get("experiment_id"),
            **(ckpt.get("lineage") or {}),
        }


@dataclass
class Model:
    name: str
    record: dict[str, Any] = field(default_factory=dict, repr=False)
    _api: Client | None = field(default=None, repr=False)

    def get_version(self, version: int | str = -1) -> ModelVersion:
        """Version `n`, an alias name, or -1 for the newest (as in Determined)."""
        api = self._api or _api()
        if version == -1:
            versions = api.list_model_versions(self.name)
            if not versions:
                raise LookupError(f"model {self.name!r} has no versions")
            rec = versions[-1]
        else:
            rec = api.get_model_version(self.name, version)
        return ModelVersion(self.name, rec["version"], rec, api)

    def get_versions(self) -> list[ModelVersion]:
        api = self._api or _api()
        return [
            ModelVersion(self.name, r["version"], r, api)
            for r in api.list_model_versions(self.name)
        ]

    def register_version(self, checkpoint_uuid: str, **fields: Any) -> ModelVersion:
        api = self._api or _api()
        rec = api.register_model_version(self.name, checkpoint_uuid, **fields)
        return ModelVersion(self.name, rec["version"], rec, api)

    def set_alias(self, alias: str, version: int) -> None:
        (self._api or _api()).set_model_alias(self.name, alias, version)


def get_model(name: str) -> Model:
    api = _api()
    return Model(name, api.get_model(name), api)


def create_model(name: str, description: str | None = None, **fields: Any) -> Model:
    api = _api()
    return Model(name, api.create_model(name, description=description, **fields), api)


def get_models() -> list[Model]:
    api = _api()
    return [Model(m["name"], m, api) for m in api.list_models()]


def get_checkpoint(uuid: str) -> Checkpoint:
    api = _api()
    return Checkpoint(uuid, api.get_checkpoint(uuid), api)
