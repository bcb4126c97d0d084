"""`Client`: one typed method per route of docs/api.md, shared by the CLI, harness, TUI and agent.

Methods return the JSON objects of the contract (plain dicts) unwrapped from their envelope, so
callers never index `["experiment"]` themselves.
"""

from __future__ import annotations

import logging
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.api._client_more import MasterCalls, RegistryCalls
from harness.api._session import Session
from harness.api._tasks import JSON, TaskCalls

logger = logging.getLogger("harness.api")


def trial_rung(trial: Mapping[str, Any], rung_lengths: list[int]) -> int | None:
    """The ASHA rung (1-based) a trial trains to, from `describe_experiment`'s `rung_lengths`;
    None for a search without rungs (the CLI and det-tui both show it)."""
    target = trial.get("searcher_target")
    if len(rung_lengths) > 1 and target in rung_lengths:
        return rung_lengths.index(target) + 1
    return None


class Client(TaskCalls, RegistryCalls, MasterCalls):
    """Typed access to the master's REST API through one `Session` (one master, one token).
    Tasks' routes are in `_tasks`, the model registry's and the master's own in `_client_more`."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @classmethod
    def connect(cls, master: str, token: str | None = None) -> Client:
        return cls(Session(master, token))

    @property
    def master(self) -> str:
        return self.session.master

    # ---- health and auth -------------------------------------------------------------------
    def health(self) -> JSON:
        return self.session.get("/health")

    def login(self, username: str, password: str) -> JSON:
        """Log in and use the new token from now on; returns `{"token", "user"}`."""
        body = self.session.post("/auth/login", {"username": username, "password": password})
        self.session.token = body["token"]
        return body

    def logout(self) -> None:
        self.session.post("/auth/logout")
        self.session.token = None

    def me(self) -> JSON:
        return self.session.get("/me")["user"]

    def list_users(self) -> list[JSON]:
        return self.session.get("/users")["users"]

    def create_user(self, username: str, password: str, admin: bool = False) -> JSON:
        body = {"username": username, "password": password, "admin": admin}
        return self.session.post("/users", body)["user"]

    def patch_user(
        self,
        username: str,
        *,
        password: str | None = None,
        admin: bool | None = None,
        active: bool | None = None,
    ) -> JSON:
        patch = {
            k: v
            for k, v in {"password": password, "admin": admin, "active": active}.items()
            if v is not None
        }
        body = self.session.patch(f"/users/{username}", patch)
        return body.get("user", body) if isinstance(body, dict) else {}

    def change_password(
        self, username: str, password: str, current_password: str | None = None
    ) -> JSON:
        """Set a password: your own needs `current_password` (an admin resetting another
        user's does not). The master revokes the user's other sessions and reissues yours:
        this client carries on with the new token, which is returned as `token`."""
        body: dict[str, Any] = {"password": password}
        if current_password is not None:
            body["current_password"] = current_password
        reply = self.session.patch(f"/users/{username}", body)
        if isinstance(reply, dict) and reply.get("token"):
            self.session.token = reply["token"]
        return reply if isinstance(reply, dict) else {}

    def link_with_agent_user(
        self, username: str, *, agent_uid: int, agent_gid: int, agent_user: str, agent_group: str
    ) -> JSON:
        """The Unix user `username`'s trials run as on agents (Determined's command of the name)."""
        body = {
            "agent_uid": agent_uid,
            "agent_gid": agent_gid,
            "agent_user": agent_user,
            "agent_group": agent_group,
        }
        resp = self.session.request("PUT", f"/users/{username}/agent-user-group", json=body)
        return resp.json()["user"]

    # ---- experiments -----------------------------------------------------------------------
    def create_experiment(
        self, config_text: str, model_def: bytes | None = None, activate: bool = True
    ) -> JSON:
        """POST the YAML text (and the model dir as .tar.gz bytes) as multipart/form-data."""
        return self.submit_experiment(config_text, model_def, activate)["experiment"]

    def submit_experiment(
        self,
        config_text: str,
        model_def: bytes | None = None,
        activate: bool = True,
        template: str | None = None,
        validate_only: bool = False,
        fail_if_cannot_fit: bool = False,
    ) -> JSON:
        """The whole reply: `{"experiment": ..., "warnings": [...]}`, or with `validate_only`
        `{"config": expanded, "warnings": [...]}` (nothing is created). `fail_if_cannot_fit`: a
        400 instead of a warning when slots_per_trial exceeds the pool's connected agents."""
        files: dict[str, Any] = {"config": (None, config_text, "application/yaml")}
        if model_def is not None:
            files["model_def"] = ("model_def.tar.gz", model_def, "application/gzip")
        params = {"activate": "true" if activate else "false"}
        if template:
            params["template"] = template
        if validate_only:
            params["validate_only"] = "true"
        if fail_if_cannot_fit:
            params["fail_if_cannot_fit"] = "true"
        resp = self.session.request(
            "POST",
            "/experiments",
            files=files,
            params=params,
            timeout=max(self.session.timeout, 120.0),
        )
        return resp.json()

    def patch_experiment(self, exp_id: int, **changes: Any) -> JSON:
        return self.session.request("PATCH", f"/experiments/{exp_id}", json=changes).json()[
            "experiment"
        ]

    # ---- templates -------------------------------------------------------------------------
    def list_templates(self) -> list[JSON]:
        return self.session.get("/templates")["templates"]

    def get_template(self, name: str) -> JSON:
        return self.session.get(f"/templates/{name}")["template"]

    def set_template(self, name: str, config_text: str) -> JSON:
        body = {"config": config_text}
        return self.session.request("PUT", f"/templates/{name}", json=body).json()["template"]

    def remove_template(self, name: str) -> None:
        self.session.request("DELETE", f"/templates/{name}")

    def render_template(self, name: str, config_text: str, source: str = "config") -> JSON:
        return self.session.post(
            f"/templates/{name}/render", {"config": config_text, "source": source}
        )

    def list_experiments(
        self,
        state: str | None = None,
        user: str | None = None,
        limit: int = 100,
        offset: int = 0,
        archived: bool | None = None,
    ) -> tuple[list[JSON], int]:
        """One page, newest first: `(experiments, total)`."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if state:
            params["state"] = state
        if user:
            params["user"] = user
        if archived is not None:
            params["archived"] = str(archived).lower()
        body = self.session.get("/experiments", params=params)
        exps = body["experiments"]
        return exps, int(body.get("total", len(exps)))

    def iter_experiments(
        self,
        state: str | None = None,
        user: str | None = None,
        page: int = 100,
        archived: bool | None = None,
    ) -> Iterator[JSON]:
        """Every matching experiment, paging through the list route."""
        offset = 0
        while True:
            exps, total = self.list_experiments(state, user, page, offset, archived)
            yield from exps
            offset += len(exps)
            if not exps or offset >= total:
                return

    def describe_experiment(self, exp_id: int, trials: bool = True) -> JSON:
        """`{"experiment": Experiment, "trials": [Trial], "rung_lengths": [int]}` in one request
        (`trials=False`: without the trials, cheap however many there are)."""
        if not trials:
            return self.session.get(f"/experiments/{exp_id}", params={"trials": "false"})
        return self.session.get(f"/experiments/{exp_id}")

    def get_experiment(self, exp_id: int) -> JSON:
        """The experiment without its trials (one cheap request however many it has)."""
        return self.session.get(f"/experiments/{exp_id}", params={"trials": "false"})["experiment"]

    def list_experiment_trials(self, exp_id: int) -> list[JSON]:
        return self.session.get(f"/experiments/{exp_id}/trials")["trials"]

    def get_experiment_config(self, exp_id: int) -> JSON:
        """`{"config": expanded config, "original": yaml text}`."""
        return self.session.get(f"/experiments/{exp_id}/config")

    def get_model_def(self, exp_id: int) -> bytes:
        return self.session.request("GET", f"/experiments/{exp_id}/model_def").content

    def preview_search(self, config_text: str) -> JSON:
        """What a config's search will run, computed by the master; nothing is created."""
        return self.session.post("/experiments/preview", {"config": config_text})["preview"]

    def _exp_action(self, exp_id: int, action: str) -> JSON:
        return self.session.post(f"/experiments/{exp_id}/{action}")["experiment"]

    def pause_experiment(self, exp_id: int) -> JSON:
        return self._exp_action(exp_id, "pause")

    def activate_experiment(self, exp_id: int) -> JSON:
        return self._exp_action(exp_id, "activate")

    def cancel_experiment(self, exp_id: int) -> JSON:
        return self._exp_action(exp_id, "cancel")

    def kill_experiment(self, exp_id: int) -> JSON:
        return self._exp_action(exp_id, "kill")

    def continue_experiment(self, exp_id: int, override_config: str | None = None) -> JSON:
        """Re-open an ended single-trial experiment; its same trial trains on (YAML overrides)."""
        body = {"override_config": override_config} if override_config else {}
        return self.session.post(f"/experiments/{exp_id}/continue", body)["experiment"]

    # ---- trials ----------------------------------------------------------------------------
    def get_trial(self, trial_id: int) -> JSON:
        return self.session.get(f"/trials/{trial_id}")["trial"]

    def trial_metrics(
        self,
        trial_id: int,
        group: str | None = None,
        after_steps: int | None = None,
        limit: int | None = None,
    ) -> list[JSON]:
        params = {
            k: v
            for k, v in {"group": group, "after_steps": after_steps, "limit": limit}.items()
            if v is not None
        }
        return self.session.get(f"/trials/{trial_id}/metrics", params=params)["metrics"]

    def trial_logs(
        self,
        trial_id: int,
        after: int = 0,
        limit: int = 1000,
        follow: bool = False,
        timeout: float = 30.0,
    ) -> JSON:
        """One page of logs: `{"logs": [Log], "last_seq": N, "done": bool}`."""
        return self._logs_page(f"/trials/{trial_id}/logs", after, limit, follow, timeout)

    def follow_trial_logs(
        self, trial_id: int, after: int = 0, timeout: float = 30.0, max_outage: float = 120.0
    ) -> Iterator[JSON]:
        """Every log line after `after`, long-polling until the master says the trial is `done`.

        Rides out a master restart of up to `max_outage` seconds.
        """
        return self._follow_logs(f"/trials/{trial_id}/logs", after, timeout, max_outage)

    def kill_trial(self, trial_id: int) -> JSON:
        """Kill one trial (Determined's POST /api/v1/trials/ID/kill); its experiment goes on."""
        return self.session.post(f"/trials/{trial_id}/kill", {})["trial"]

    def list_trial_checkpoints(self, trial_id: int) -> list[JSON]:
        return self.session.get(f"/trials/{trial_id}/checkpoints")["checkpoints"]

    def metric_names(self, trial_id: int) -> JSON:
        """`{"training": [name, ...], "validation": [...]}`: the numeric metrics reported."""
        return self.session.get(f"/trials/{trial_id}/metric-names")

    def metric_series(
        self,
        trial_id: int,
        group: str,
        names: list[str] | tuple[str, ...],
        max_points: int = 500,
    ) -> JSON:
        """`{"series": {name: {"steps": [...], "values": [...]}}, "downsampled": bool}`;
        downsampled on the master (min/max per bucket)."""
        params = {"group": group, "names": ",".join(names), "max_points": max_points}
        return self.session.get(f"/trials/{trial_id}/metric-series", params=params)

    # ---- checkpoints -----------------------------------------------------------------------
    def list_checkpoints(
        self, experiment_id: int | None = None, trial_id: int | None = None
    ) -> list[JSON]:
        params = {
            k: v
            for k, v in {"experiment_id": experiment_id, "trial_id": trial_id}.items()
            if v is not None
        }
        return self.session.get("/checkpoints", params=params)["checkpoints"]

    def get_checkpoint(self, uuid: str) -> JSON:
        return self.session.get(f"/checkpoints/{uuid}")["checkpoint"]

    def patch_checkpoint_metadata(
        self, uuid: str, add: Mapping[str, Any] | None = None, remove: list[str] | None = None
    ) -> JSON:
        """Merge `add` into the checkpoint's metadata and drop the `remove` keys."""
        body = {"add": dict(add or {}), "remove": list(remove or [])}
        return self.session.request("PATCH", f"/checkpoints/{uuid}/metadata", json=body).json()[
            "checkpoint"
        ]

    def download_checkpoint(self, uuid: str, dest: str | Path) -> Path:
        """Fetch the checkpoint as a .tar.gz from the master and unpack it into `dest`."""
        dest = Path(dest)
        resp = self.session.request(
            "GET", f"/checkpoints/{uuid}/download", stream=True, timeout=300.0
        )
        dest.mkdir(parents=True, exist_ok=True)
        # Unpacked as it arrives (tarfile's stream mode): never the whole archive in memory.
        with resp, tarfile.open(fileobj=resp.raw, mode="r|*") as tar:
            tar.extractall(dest, filter="data")
        return dest

    def report_checkpoint(
        self,
        uuid: str,
        trial_id: int,
        steps_completed: int,
        metadata: Mapping[str, Any],
        resources: Mapping[str, int],
        state: str = "COMPLETED",
    ) -> JSON:
        body = {
            "uuid": uuid,
            "trial_id": trial_id,
            "steps_completed": steps_completed,
            "metadata": dict(metadata),
            "resources": dict(resources),
            "state": state,
        }
        # The same checkpoint registered again by its trial answers the stored record.
        return self.session.post("/checkpoints", body, retry=True)["checkpoint"]

    # ---- job queue -------------------------------------------------------------------------
    def job_queues(self, pool: str | None = None) -> list[JSON]:
        """`[Pool]`, each with its `jobs` in queue order (the order the scheduler considers)."""
        params = {"pool": pool} if pool else None
        return self.session.get("/job-queues", params=params)["pools"]

    def update_job(self, job_id: str | int, **changes: Any) -> JSON:
        """PATCH a job: `priority`, `weight`, `resource_pool`, `ahead_of`, `behind_of`."""
        body = {k: v for k, v in changes.items() if v is not None}
        for key in ("ahead_of", "behind_of"):
            if key in body:
                body[key] = str(body[key])
        resp = self.session.patch(f"/jobs/{job_id}", body)
        # `notes`: what changed besides the request (moving ahead of a job takes its priority).
        return {**resp["job"], "notes": resp.get("notes") or []}

    # ---- agents ----------------------------------------------------------------------------
    def list_agents(self, all_agents: bool = False) -> list[JSON]:
        """The agents; without `all_agents`, LOST ones gone longer than the master's
        lost_agent_retention are left out."""
        params = {"all": "true"} if all_agents else None
        return self.session.get("/agents", params=params)["agents"]

    def provisioner_pools(self) -> list[JSON]:
        """Pools with a cloud provider: instances, pending launches, the last launch error."""
        return self.session.get("/provisioner/pools")["pools"]

    def agent_poll(self, agent_id: str, body: Mapping[str, Any]) -> JSON:
        """Register/heartbeat/fetch work; waits up to `body["wait"]` seconds on the master."""
        wait = float(body.get("wait", 0) or 0)
        return self.session.post(f"/agents/{agent_id}/poll", dict(body), timeout=wait + 30.0)

    def reset_agent_credential(self, agent_id: str) -> JSON:
        """Forget an agent's credential (admin): it joins again with the join token."""
        return self.session.delete(f"/agents/{agent_id}/credential")

    def agent_logs(self, agent_id: str, logs: list[Mapping[str, Any]]) -> int:
        body = self.session.post(f"/agents/{agent_id}/logs", {"logs": list(logs)})
        return int(body.get("accepted", len(logs)))

    # ---- harness routes (allocation session token) ------------------------------------------
    def report_metrics(self, trial_id: int, reports: list[Mapping[str, Any]]) -> int:
        body = self.session.post(f"/trials/{trial_id}/metrics", {"reports": list(reports)})
        return int(body.get("accepted", len(reports)))

    def report_metrics_raw(self, trial_id: int, payload: bytes) -> int:
        """POST an already-encoded `{"reports": [...]}` body (the metrics shipper's hot path)."""
        resp = self.session.request(
            "POST",
            f"/trials/{trial_id}/metrics",
            data=payload,
            headers={"Content-Type": "application/json"},
            retry=True,  # the payload's batch_id makes a repeat a no-op on the master
        )
        return int(resp.json().get("accepted", 0)) if resp.content else 0

    def report_trial_progress(self, trial_id: int, progress: float) -> None:
        self.session.post(f"/trials/{trial_id}/progress", {"progress": progress}, retry=True)

    def get_searcher_operation(self, trial_id: int) -> JSON:
        """`{"operation": {"length": N} | None, "completed": bool}`."""
        return self.session.get(f"/trials/{trial_id}/searcher/operation")

    def complete_searcher_operation(self, trial_id: int, length: int, searcher_metric: Any) -> None:
        body = {"length": length, "searcher_metric": searcher_metric}
        # A repeat of a recorded completion is a no-op on the master.
        self.session.post(f"/trials/{trial_id}/searcher/completed_operation", body, retry=True)

    def report_early_exit(self, trial_id: int, reason: str) -> None:
        self.session.post(f"/trials/{trial_id}/early_exit", {"reason": reason}, retry=True)

    def get_preemption(self, allocation_id: str, timeout: float = 30.0) -> bool:
        """Long poll: returns at once when preempted, else after up to `timeout` seconds."""
        body = self.session.get(
            f"/allocations/{allocation_id}/preemption",
            params={"timeout": timeout},
            timeout=timeout + 15.0,
        )
        return bool(body.get("preempt"))

    def ack_preemption(self, allocation_id: str) -> None:
        self.session.post(f"/allocations/{allocation_id}/ack_preemption", retry=True)

    def rendezvous(
        self, allocation_id: str, body: Mapping[str, Any], timeout: float = 60.0
    ) -> JSON:
        # Posting the same rank's address again replaces it: safe to repeat.
        return self.session.post(
            f"/allocations/{allocation_id}/rendezvous", dict(body), timeout=timeout, retry=True
        )

    # ---- checkpoint GC (see docs/checkpoints.md) -------------------------------------------
    def checkpoint_gc_plan(self, exp_id: int, **policy: int) -> JSON:
        """What the experiment's policy (with overrides) would delete now, and bytes freed."""
        params = {k: v for k, v in policy.items() if v is not None}
        return self.session.get(f"/experiments/{exp_id}/checkpoint-gc", params=params)

    def set_gc_policy(self, exp_id: int, **policy: int) -> JSON:
        body = {k: v for k, v in policy.items() if v is not None}
        return self.session.patch(f"/experiments/{exp_id}/gc-policy", body)

    def checkpoint_usage(self, exp_id: int) -> JSON:
        return self.session.get(f"/experiments/{exp_id}/checkpoint-usage")

    def delete_checkpoints(self, uuids: list[str]) -> JSON:
        return self.session.delete("/checkpoints", json={"checkpoint_uuids": list(uuids)})

    def delete_tensorboard_files(self, exp_id: int) -> JSON:
        return self.session.delete(f"/experiments/{exp_id}/tensorboard-files", timeout=600.0)

    def delete_experiment(self, exp_id: int) -> JSON:
        return self.session.delete(f"/experiments/{exp_id}", timeout=600.0)
