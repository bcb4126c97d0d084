"""Every REST route × every kind of caller -> the status it gets (on real PostgreSQL).

The table below has one row per route and method of the Flask url_map under /api/v1: a route
added without a row (or a row left for a removed route) fails the test, so nobody adds a route
without deciding who may call it. The rules are summarised in docs/api.md ("Who may call what").

Columns, in order (headed by their first three letters in the table):
  anon     no token
  other    a user who owns nothing here (bob)
  owner    the user who owns the experiment, trial, model and template (alice)
  admin    an admin who owns none of them
  agent    the cluster's agent token
  trial    the session token of the owner's running trial (this trial's token)
  o.trial  the session token of another user's running trial (another trial's token)

Rows that change or delete something name a `new_*` target: each call gets a fresh one, so every
column sees the same starting state and the allowed ones get their success status.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import AGENT, login, poll, start_one, submit, trial_auth

REPORT = {"group": "training", "steps_completed": 1, "metrics": {"loss": 1}}
WHO = ("anon", "other", "owner", "admin", "agent", "trial", "o.trial")


@dataclass
class Row:
    method: str
    path: str  # the url_map rule with its arguments filled from the world's `{names}`
    expect: str  # one status per column of WHO
    url: str = ""  # the concrete URL (format string over the world); default: `path`
    body: Callable[[World], Any] | None = None


def R(method: str, path: str, expect: str, url: str = "", body: Any = None) -> Row:  # noqa: N802
    """A row; `path` and `url` are under /api/v1."""
    return Row(method, f"/api/v1{path}", expect, f"/api/v1{url or path}", body)


# fmt: off
TABLE = [
    #                                                                ano oth own adm agt tri o.t
    R("GET", "/health",                                             "200 200 200 200 200 200 200"),
    R("GET", "/openapi.json",                                       "200 200 200 200 200 200 200"),
    R("POST", "/auth/login",                                        "200 200 200 200 200 200 200",
      body=lambda w: {"username": "alice", "password": "alice-password"}),
    R("GET", "/me",                                                 "401 200 200 200 403 403 403"),
    R("GET", "/master/stats",                                       "401 200 200 200 403 403 403"),
    R("GET", "/master",                                             "401 200 200 200 403 403 403"),
    R("GET", "/master/config",                                      "401 403 403 200 403 403 403"),
    R("GET", "/master/logs",                                        "401 403 403 200 403 403 403"),
    R("GET", "/users",                                              "401 200 200 200 403 403 403"),
    R("POST", "/users",                                             "401 403 403 201 403 403 403",
      body=lambda w: {"username": w.new_name(), "password": "password-1"}),
    R("PATCH", "/users/<username>",                                 "401 403 200 200 403 403 403",
      url="/users/alice",
      body=lambda w: {"password": "alice-password", "current_password": "alice-password"}),
    # Experiments: any user reads, the owner or an admin steers, trials only fetch their code.
    R("GET", "/experiments",                                        "401 200 200 200 403 403 403"),
    R("POST", "/experiments",                                       "401 201 201 201 403 403 403",
      body=lambda w: {"config": w.config}),
    R("POST", "/experiments/preview",                               "401 200 200 200 403 403 403",
      body=lambda w: {"config": w.config}),
    R("GET", "/experiments/<int:exp_id>",                           "401 200 200 200 403 200 403",
      url="/experiments/{exp}"),
    R("PATCH", "/experiments/<int:exp_id>",                         "401 403 200 200 403 403 403",
      url="/experiments/{exp}", body=lambda w: {"description": "changed"}),
    R("DELETE", "/experiments/<int:exp_id>",                        "401 403 200 200 403 403 403",
      url="/experiments/{new_ended_exp}"),
    R("POST", "/experiments/<int:exp_id>/<action>",                 "401 403 200 200 403 403 403",
      url="/experiments/{new_exp}/pause"),
    # Continue an ended single-trial experiment: its owner or an admin.
    R("POST", "/experiments/<int:exp_id>/continue",                 "401 403 200 200 403 403 403",
      url="/experiments/{new_ended_exp}/continue", body=lambda w: {}),
    R("GET", "/experiments/<int:exp_id>/trials",                    "401 200 200 200 403 403 403",
      url="/experiments/{exp}/trials"),
    R("GET", "/experiments/<int:exp_id>/config",                    "401 200 200 200 403 403 403",
      url="/experiments/{exp}/config"),
    R("GET", "/experiments/<int:exp_id>/model_def",                 "401 200 200 200 200 200 403",
      url="/experiments/{exp}/model_def"),
    R("GET", "/experiments/<int:exp_id>/checkpoint-gc",             "401 200 200 200 403 403 403",
      url="/experiments/{exp}/checkpoint-gc"),
    R("GET", "/experiments/<int:exp_id>/checkpoint-usage",          "401 200 200 200 403 403 403",
      url="/experiments/{exp}/checkpoint-usage"),
    R("DELETE", "/experiments/<int:exp_id>/tensorboard-files",      "401 403 200 200 403 403 403",
      url="/experiments/{exp}/tensorboard-files"),
    R("PATCH", "/experiments/<int:exp_id>/gc-policy",               "401 403 200 200 403 403 403",
      url="/experiments/{exp}/gc-policy", body=lambda w: {"save_trial_latest": 1}),
    R("GET", "/job-queues",                                         "401 200 200 200 403 403 403"),
    R("PATCH", "/jobs/<job_id>",                                    "401 403 200 200 403 403 403",
      url="/jobs/{exp}", body=lambda w: {"priority": 40}),
    # Tasks and commands: any user reads and runs commands; the owner or an admin kills one.
    R("GET", "/tasks",                                              "401 200 200 200 403 403 403"),
    R("GET", "/tasks/<task_id>",                                    "401 200 200 200 403 403 403",
      url="/tasks/{cmd}"),
    R("GET", "/tasks/<task_id>/logs",                               "401 200 200 200 403 403 403",
      url="/tasks/{cmd}/logs"),
    # A task's --context: the task's own session token alone (tests/notebooks/test_context.py).
    R("GET", "/tasks/<task_id>/context",                            "401 403 403 403 403 403 403",
      url="/tasks/{cmd}/context"),
    R("GET", "/commands",                                           "401 200 200 200 403 403 403"),
    R("POST", "/commands",                                          "401 201 201 201 403 403 403",
      body=lambda w: {"config": {"entrypoint": ["true"], "resources": {"slots": 0}}}),
    R("GET", "/commands/<task_id>",                                 "401 200 200 200 403 403 403",
      url="/commands/{cmd}"),
    R("POST", "/commands/<task_id>/kill",                           "401 403 200 200 403 403 403",
      url="/commands/{new_cmd}/kill"),
    # Notebooks: as commands (their pages: only the owner or an admin, through the proxy).
    R("GET", "/notebooks",                                          "401 200 200 200 403 403 403"),
    R("POST", "/notebooks",                                         "401 201 201 201 403 403 403",
      body=lambda w: {"config": {"resources": {"slots": 64}}}),
    R("GET", "/notebooks/<task_id>",                                "401 200 200 200 403 403 403",
      url="/notebooks/{nb}"),
    R("POST", "/notebooks/<task_id>/kill",                          "401 403 200 200 403 403 403",
      url="/notebooks/{new_nb}/kill"),
    # TensorBoards: as notebooks.
    R("GET", "/tensorboards",                                       "401 200 200 200 403 403 403"),
    R("POST", "/tensorboards",                                      "401 201 201 201 403 403 403",
      body=lambda w: {"experiment_ids": [w.exp], "config": {"resources": {"slots": 64}}}),
    R("GET", "/tensorboards/<task_id>",                             "401 200 200 200 403 403 403",
      url="/tensorboards/{tb}"),
    R("POST", "/tensorboards/<task_id>/kill",                       "401 403 200 200 403 403 403",
      url="/tensorboards/{new_tb}/kill"),
    R("GET", "/shells",                                             "401 200 200 200 403 403 403"),
    R("POST", "/shells",                                            "401 201 201 201 403 403 403",
      body=lambda w: {"config": {"resources": {"slots": 64}}}),
    R("GET", "/shells/<task_id>",                                   "401 200 200 200 403 403 403",
      url="/shells/{shell}"),
    R("POST", "/shells/<task_id>/kill",                             "401 403 200 200 403 403 403",
      url="/shells/{new_shell}/kill"),
    # Trials: any user and the trial itself read; only the trial's own token writes.
    R("GET", "/trials/<int:trial_id>",                              "401 200 200 200 403 200 403",
      url="/trials/{trial}"),
    R("GET", "/trials/<int:trial_id>/metrics",                      "401 200 200 200 403 200 403",
      url="/trials/{trial}/metrics"),
    R("POST", "/trials/<int:trial_id>/metrics",                     "401 403 403 403 403 200 403",
      url="/trials/{trial}/metrics",
      body=lambda w: {"reports": [REPORT]}),
    R("GET", "/trials/<int:trial_id>/metric-names",                 "401 200 200 200 403 200 403",
      url="/trials/{trial}/metric-names"),
    R("GET", "/trials/<int:trial_id>/metric-series",                "401 200 200 200 403 200 403",
      url="/trials/{trial}/metric-series?names=loss"),
    R("GET", "/trials/<int:trial_id>/logs",                         "401 200 200 200 403 200 403",
      url="/trials/{trial}/logs"),
    R("GET", "/trials/<int:trial_id>/checkpoints",                  "401 200 200 200 403 200 403",
      url="/trials/{trial}/checkpoints"),
    R("POST", "/trials/<int:trial_id>/progress",                    "401 403 403 403 403 200 403",
      url="/trials/{trial}/progress", body=lambda w: {"progress": 0.5}),
    R("GET", "/trials/<int:trial_id>/searcher/operation",           "401 200 200 200 403 200 403",
      url="/trials/{trial}/searcher/operation"),
    # A managed trial: nobody ends it this way (its token passes the check, then 400: not
    # unmanaged). tests/compat/test_core_v2.py covers an unmanaged trial's owner.
    R("POST", "/trials/<int:trial_id>/unmanaged/exit",              "401 403 403 403 403 400 403",
      url="/trials/{trial}/unmanaged/exit", body=lambda w: {"exit_code": 0}),
    R("POST", "/trials/<int:trial_id>/early_exit",                  "401 403 403 403 403 200 403",
      url="/trials/{trial}/early_exit", body=lambda w: {"reason": "USER_CANCELED"}),
    R("POST", "/trials/<int:trial_id>/searcher/completed_operation", "401 403 403 403 403 200 403",  # noqa: E501
      url="/trials/{trial}/searcher/completed_operation",
      body=lambda w: {"length": 100, "searcher_metric": 0.5}),
    # Allocations: the harness's preemption poll (users may watch it) and its writes (own token).
    R("GET", "/allocations/<alloc_id>/preemption",                  "401 200 200 200 403 200 403",
      url="/allocations/{alloc}/preemption?timeout=0"),
    R("POST", "/allocations/<alloc_id>/ack_preemption",             "401 403 403 403 403 200 403",
      url="/allocations/{alloc}/ack_preemption"),
    R("POST", "/allocations/<alloc_id>/rendezvous",                 "401 403 403 403 403 200 403",
      url="/allocations/{alloc}/rendezvous?timeout=0",
      body=lambda w: {"container_rank": 0, "addr": "10.0.0.1", "port": 29500}),
    # Checkpoints: trials register their own; users and the trial's experiment read;
    # the owner or an admin deletes; agents report the deletions they were handed.
    R("POST", "/checkpoints",                                       "401 403 403 403 403 201 403",
      body=lambda w: w.checkpoint_body()),
    R("GET", "/checkpoints",                                        "401 200 200 200 403 200 200",
      url="/checkpoints?experiment_id={exp}"),  # o.trial: 200 with none of them
    R("GET", "/checkpoints/<uuid>",                                 "401 200 200 200 403 200 403",
      url="/checkpoints/{ckpt}"),
    R("PATCH", "/checkpoints/<uuid>/metadata",                      "401 403 200 200 403 403 403",
      url="/checkpoints/{ckpt}/metadata", body=lambda w: {"add": {"k": 1}}),
    R("GET", "/checkpoints/<uuid>/download",                        "401 200 200 200 403 200 403",
      url="/checkpoints/{ckpt}/download"),
    R("DELETE", "/checkpoints",                                     "401 403 200 200 403 403 403",
      body=lambda w: {"checkpoint_uuids": [w.new_checkpoint()]}),
    R("POST", "/checkpoints/<uuid>/deleted",                        "401 403 403 403 200 403 403",
      url="/checkpoints/{new_deleting_checkpoint}/deleted", body=lambda w: {"error": None}),
    # Agents: the agent token (a join token: its own agent id alone); users list them.
    R("GET", "/agents",                                             "401 200 200 200 403 403 403"),
    R("POST", "/agents/<agent_id>/poll",                            "401 403 403 403 200 403 403",
      url="/agents/a9/poll", body=lambda w: w.poll_body()),
    R("POST", "/agents/<agent_id>/logs",                            "401 403 403 403 200 403 403",
      url="/agents/a1/logs",
      body=lambda w: {"logs": [{"allocation_id": w.alloc, "stream": "stdout", "line": "x"}]}),
    R("GET", "/agents/<agent_id>/allocations/<alloc_id>/logs",      "401 403 403 403 200 403 403",
      url="/agents/a1/allocations/{alloc}/logs"),
    R("POST", "/agents/<agent_id>/interruption",                    "401 403 403 403 200 403 403",
      url="/agents/a9/interruption"),
    # The join token for an agent id's own credential (once); an admin resets a lost one.
    R("POST", "/agents/<agent_id>/credential",                      "401 403 403 403 201 403 403",
      url="/agents/{new_name}/credential"),
    R("DELETE", "/agents/<agent_id>/credential",                    "401 403 403 200 403 403 403",
      url="/agents/{new_credentialed_agent}/credential"),
    # Which Unix user a user's trials run as: admins only.
    R("PUT", "/users/<username>/agent-user-group",                  "401 403 403 200 403 403 403",
      url="/users/alice/agent-user-group", body=lambda w: {
          "agent_uid": 1001, "agent_gid": 1001, "agent_user": "alice", "agent_group": "lab"}),
    R("DELETE", "/users/<username>/agent-user-group",               "401 403 403 200 403 403 403",
      url="/users/alice/agent-user-group"),
    R("GET", "/provisioner/pools",                                  "401 200 200 200 403 403 403"),
    # Templates: shared by the lab, any user.
    R("GET", "/templates",                                          "401 200 200 200 403 403 403"),
    R("GET", "/templates/<name>",                                   "401 200 200 200 403 403 403",
      url="/templates/{tpl}"),
    R("PUT", "/templates/<name>",                                   "401 201 201 201 403 403 403",
      url="/templates/{new_name}", body=lambda w: {"config": {"max_restarts": 1}}),
    R("DELETE", "/templates/<name>",                                "401 403 200 200 403 403 403",
      url="/templates/{new_template}"),
    R("POST", "/templates/<name>/render",                           "401 200 200 200 403 403 403",
      url="/templates/{tpl}/render", body=lambda w: {"config": w.config}),
    # The model registry: any user reads; the owner or an admin changes.
    R("GET", "/models",                                             "401 200 200 200 403 403 403"),
    R("POST", "/models",                                            "401 201 201 201 403 403 403",
      body=lambda w: {"name": w.new_name()}),
    R("GET", "/models/<ref>",                                       "401 200 200 200 403 403 403",
      url="/models/{model}"),
    R("PATCH", "/models/<ref>",                                     "401 403 200 200 403 403 403",
      url="/models/{model}", body=lambda w: {"description": "changed"}),
    R("DELETE", "/models/<ref>",                                    "401 403 200 200 403 403 403",
      url="/models/{new_model}"),
    R("POST", "/models/<ref>/archive",                              "401 403 200 200 403 403 403",
      url="/models/{new_model}/archive"),
    R("POST", "/models/<ref>/unarchive",                            "401 403 200 200 403 403 403",
      url="/models/{new_model}/unarchive"),
    R("GET", "/models/<ref>/versions",                              "401 200 200 200 403 403 403",
      url="/models/{model}/versions"),
    R("POST", "/models/<ref>/versions",                             "401 403 201 201 403 403 403",
      url="/models/{new_model}/versions", body=lambda w: {"checkpoint_uuid": w.ckpt}),
    R("GET", "/models/<ref>/versions/<version>",                    "401 200 200 200 403 403 403",
      url="/models/{model}/versions/1"),
    R("PATCH", "/models/<ref>/versions/<int:version>",              "401 403 200 200 403 403 403",
      url="/models/{model}/versions/1", body=lambda w: {"comment": "changed"}),
    R("DELETE", "/models/<ref>/versions/<int:version>",             "401 403 200 200 403 403 403",
      url="/models/{new_model_with_version}/versions/1"),
    R("GET", "/models/<ref>/aliases",                               "401 200 200 200 403 403 403",
      url="/models/{model}/aliases"),
    R("PUT", "/models/<ref>/aliases/<alias>",                       "401 403 200 200 403 403 403",
      url="/models/{model}/aliases/production", body=lambda w: {"version": 1}),
    R("DELETE", "/models/<ref>/aliases/<alias>",                    "401 403 200 200 403 403 403",
      url="/models/{new_model_with_alias}/aliases/production"),
    # Last: it revokes each caller's own token.
    R("POST", "/auth/logout",                                       "401 200 200 200 403 403 403"),
]
# fmt: on

CONFIG = """
name: perm-test
entrypoint: python3 train.py
hyperparameters: {lr: 0.1}
searcher: {name: single, metric: loss, max_length: {batches: 100}}
"""


@dataclass
class World:
    """Two users' running trials, a checkpoint, a model and a template; fresh targets on demand."""

    app: Flask
    client: FlaskClient
    tokens: dict[str, dict] = field(default_factory=dict)
    config: str = CONFIG
    exp: int = 0
    trial: int = 0
    alloc: str = ""
    ckpt: str = ""
    model: str = "m-owned"
    tpl: str = "t-shared"
    cmd: str = ""
    nb: str = ""
    tb: str = ""
    shell: str = ""
    counter: int = 0

    def new_name(self) -> str:
        self.counter += 1
        return f"n{self.counter}"

    def ok(self, r: Any, status: int = 200) -> Any:
        assert r.status_code in (status, 200, 201), (r.request.path, r.status_code, r.json)
        return r.json

    def checkpoint_body(self) -> dict:
        return {
            "uuid": str(uuid.uuid4()),
            "trial_id": self.trial,
            "steps_completed": 10 + self.counter,
            "metadata": {},
            "resources": {"model.pt": 1},
        }

    def new_checkpoint(self) -> str:
        self.counter += 1
        r = self.client.post(
            "/api/v1/checkpoints", json=self.checkpoint_body(), headers=self.tokens["trial"]
        )
        return self.ok(r)["checkpoint"]["uuid"]

    def new_deleting_checkpoint(self) -> str:
        uuid_ = self.new_checkpoint()
        r = self.client.delete(
            "/api/v1/checkpoints", json={"checkpoint_uuids": [uuid_]}, headers=self.tokens["owner"]
        )
        assert self.ok(r)["deleting"] == [uuid_]
        return uuid_

    def new_credentialed_agent(self) -> str:
        agent_id = self.new_name()
        self.ok(self.client.post(f"/api/v1/agents/{agent_id}/credential", headers=AGENT), 201)
        return agent_id

    def new_cmd(self) -> str:
        """A command of the owner's (queued: it asks for more slots than the world has)."""
        body = {"config": {"entrypoint": ["true"], "resources": {"slots": 64}}}
        r = self.client.post("/api/v1/commands", json=body, headers=self.tokens["owner"])
        return self.ok(r, 201)["command"]["id"]

    def new_nb(self) -> str:
        """A notebook of the owner's (queued: it asks for more slots than the world has)."""
        body = {"config": {"resources": {"slots": 64}}}
        r = self.client.post("/api/v1/notebooks", json=body, headers=self.tokens["owner"])
        return self.ok(r, 201)["notebook"]["id"]

    def new_tb(self) -> str:
        """A TensorBoard of the owner's (queued: it asks for more slots than the world has)."""
        body = {"experiment_ids": [self.exp], "config": {"resources": {"slots": 64}}}
        r = self.client.post("/api/v1/tensorboards", json=body, headers=self.tokens["owner"])
        return self.ok(r, 201)["tensorboard"]["id"]

    def new_shell(self) -> str:
        """A shell of the owner's (queued: it asks for more slots than the world has)."""
        body = {"config": {"resources": {"slots": 64}}}
        r = self.client.post("/api/v1/shells", json=body, headers=self.tokens["owner"])
        return self.ok(r, 201)["shell"]["id"]

    def new_exp(self) -> int:
        return submit(self.client, self.tokens["owner"], self.config)["experiment"]["id"]

    def new_ended_exp(self) -> int:
        exp_id = self.new_exp()
        r = self.client.post(f"/api/v1/experiments/{exp_id}/kill", headers=self.tokens["owner"])
        assert self.ok(r)["experiment"]["state"] == "CANCELED", r.json
        return exp_id

    def new_model(self) -> str:
        name = self.new_name()
        self.ok(
            self.client.post("/api/v1/models", json={"name": name}, headers=self.tokens["owner"])
        )
        return name

    def new_model_with_version(self) -> str:
        name = self.new_model()
        r = self.client.post(
            f"/api/v1/models/{name}/versions",
            json={"checkpoint_uuid": self.ckpt},
            headers=self.tokens["owner"],
        )
        self.ok(r)
        return name

    def new_model_with_alias(self) -> str:
        name = self.new_model_with_version()
        r = self.client.put(
            f"/api/v1/models/{name}/aliases/production",
            json={"version": 1},
            headers=self.tokens["owner"],
        )
        self.ok(r)
        return name

    def new_template(self) -> str:
        name = self.new_name()
        r = self.client.put(
            f"/api/v1/templates/{name}", json={"config": {}}, headers=self.tokens["owner"]
        )
        self.ok(r)
        return name

    def poll_body(self) -> dict:
        from detlab.protocol import PROTOCOL_VERSION

        return {"protocol": PROTOCOL_VERSION, "resource_pool": "default", "slots": [], "wait": 0}

    def url(self, template: str) -> str:
        return template.format_map(_Lazy(self))


class _Lazy(dict):
    """`{exp}` is the world's; `{new_x}` calls `world.new_x()` for a fresh target."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world

    def __missing__(self, key: str) -> Any:
        value = getattr(self.world, key)
        return value() if key.startswith("new_") else value


def build_world(app: Flask, client: FlaskClient) -> World:
    w = World(app, client)
    admin = login(client)
    for name in ("alice", "bob"):
        r = client.post(
            "/api/v1/users", json={"username": name, "password": f"{name}-password"}, headers=admin
        )
        assert r.status_code == 201, r.json
    w.tokens = {
        "anon": {},
        "other": login(client, "bob", "bob-password"),
        "owner": login(client, "alice", "alice-password"),
        "admin": admin,
        "agent": AGENT,
    }
    w.exp = submit(client, w.tokens["owner"], CONFIG, model_def=b"tarball")["experiment"]["id"]
    spec = start_one(app, client, agent_id="a1")
    w.trial, w.alloc = spec["trial_id"], spec["allocation_id"]
    w.tokens["trial"] = trial_auth(spec)
    submit(client, w.tokens["other"], CONFIG)
    w.tokens["o.trial"] = trial_auth(start_one(app, client, agent_id="a2"))
    poll(client, agent_id="a9")
    ckpt = w.ok(
        client.post("/api/v1/checkpoints", json=w.checkpoint_body(), headers=w.tokens["trial"])
    )
    w.ckpt = ckpt["checkpoint"]["uuid"]
    path = ckpt["checkpoint"]["storage"]["path"]
    import os

    os.makedirs(path, exist_ok=True)  # the files the download route tars
    with open(os.path.join(path, "model.pt"), "wb") as f:
        f.write(b"w")
    w.ok(client.post("/api/v1/models", json={"name": w.model}, headers=w.tokens["owner"]))
    r = client.post(
        f"/api/v1/models/{w.model}/versions",
        json={"checkpoint_uuid": w.ckpt},
        headers=w.tokens["owner"],
    )
    w.ok(r)
    w.ok(client.put(f"/api/v1/templates/{w.tpl}", json={"config": {}}, headers=w.tokens["owner"]))
    w.cmd = w.new_cmd()
    w.nb = w.new_nb()
    w.tb = w.new_tb()
    w.shell = w.new_shell()
    return w


def test_the_table_covers_every_rest_route_exactly(app: Flask) -> None:
    served = {
        (method, rule.rule)
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/api/")
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    listed = [(row.method, row.path) for row in TABLE]
    assert len(listed) == len(set(listed)), "a route is listed twice"
    missing = sorted(served - set(listed))
    phantom = sorted(set(listed) - served)
    assert not missing, f"routes with no row in the permission table (add one): {missing}"
    assert not phantom, f"rows for routes the master does not serve: {phantom}"
    assert all(len(row.expect.split()) == len(WHO) for row in TABLE)
    assert TABLE[-1].path == "/api/v1/auth/logout"  # it revokes the callers' tokens
    # Outside /api/ only the web pages (signed-in browsers, their own tests) and static files.
    others = {
        r.endpoint.split(".")[0] for r in app.url_map.iter_rules() if not r.rule.startswith("/api/")
    }
    assert others <= {"web", "static"}, others


def test_every_route_answers_each_kind_of_caller_as_the_table_says(
    app: Flask, client: FlaskClient
) -> None:
    w = build_world(app, client)
    wrong = []
    for row in TABLE:
        for who, want in zip(WHO, row.expect.split(), strict=True):
            url = w.url(row.url)
            body = row.body(w) if row.body else None
            r = client.open(url, method=row.method, json=body, headers=w.tokens[who])
            if r.status_code != int(want):
                error = (r.json or {}).get("error", {}) if r.is_json else {}
                wrong.append(
                    f"{row.method} {row.path} as {who}: {r.status_code}, expected {want} "
                    f"({error.get('message', '')[:120]})"
                )
        if row.path.endswith("/users/<username>"):  # a password change revoked alice's sessions
            w.tokens["owner"] = login(client, "alice", "alice-password")
    assert not wrong, "\n" + "\n".join(wrong)
