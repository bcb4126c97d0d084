"""More of `Client`'s routes, split out to keep each module small: the model registry and the
master's own routes (`det master info|config|logs`)."""

from __future__ import annotations

from typing import Any

from harness.api._session import Session

JSON = dict[str, Any]


class RegistryCalls:
    session: Session

    def create_model(self, name: str, **fields: Any) -> JSON:
        body = {"name": name, **{k: v for k, v in fields.items() if v is not None}}
        return self.session.post("/models", body)["model"]

    def list_models(self, archived: bool | None = None) -> list[JSON]:
        params = {} if archived is None else {"archived": str(archived).lower()}
        return self.session.get("/models", params=params)["models"]

    def get_model(self, name: str) -> JSON:
        return self.session.get(f"/models/{name}")["model"]

    def patch_model(self, name: str, /, **fields: Any) -> JSON:
        return self.session.patch(f"/models/{name}", fields)["model"]

    def archive_model(self, name: str, archived: bool = True) -> JSON:
        action = "archive" if archived else "unarchive"
        return self.session.post(f"/models/{name}/{action}")["model"]

    def delete_model(self, name: str) -> JSON:
        return self.session.delete(f"/models/{name}")

    def list_model_versions(self, name: str) -> list[JSON]:
        return self.session.get(f"/models/{name}/versions")["model_versions"]

    def get_model_version(self, name: str, version: int | str) -> JSON:
        """A version by number or by alias."""
        return self.session.get(f"/models/{name}/versions/{version}")["model_version"]

    def register_model_version(self, name: str, checkpoint_uuid: str, **fields: Any) -> JSON:
        body = {"checkpoint_uuid": checkpoint_uuid}
        body.update({k: v for k, v in fields.items() if v is not None})
        return self.session.post(f"/models/{name}/versions", body)["model_version"]

    def delete_model_version(self, name: str, version: int) -> JSON:
        return self.session.delete(f"/models/{name}/versions/{version}")

    def model_aliases(self, name: str) -> JSON:
        """`{"aliases": {alias: version}, "history": [...]}`."""
        return self.session.get(f"/models/{name}/aliases")

    def set_model_alias(self, name: str, alias: str, version: int) -> JSON:
        resp = self.session.request(
            "PUT", f"/models/{name}/aliases/{alias}", json={"version": version}
        )
        return resp.json()

    def remove_model_alias(self, name: str, alias: str) -> JSON:
        return self.session.delete(f"/models/{name}/aliases/{alias}")


class MasterCalls:
    session: Session

    def master_info(self) -> JSON:
        return self.session.get("/master")

    def master_config(self) -> JSON:
        """The master's configuration, credentials masked (admins)."""
        return self.session.get("/master/config")["config"]

    def master_logs(self, after: int = 0, tail: int | None = None, limit: int = 1000) -> list[JSON]:
        params: dict[str, Any] = {"after": after, "limit": limit}
        if tail is not None:
            params["tail"] = tail
        return self.session.get("/master/logs", params=params)["logs"]
