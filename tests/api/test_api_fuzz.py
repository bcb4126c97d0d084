"""Schemathesis against a real master on PostgreSQL, from the spec it serves: no request gets a 5xx.

Every operation of GET /api/v1/openapi.json is fuzzed (valid and invalid inputs, schemathesis's
examples, coverage and fuzzing phases) with a bounded number of cases against a cluster holding
an experiment whose trial really runs (on a process-runtime agent), a second one, a template and
a model. Each operation gets the token its description lists first: the admin's, the agent
token, or the running trial's own session token (then aimed at that trial and allocation, so the
harness routes' bodies are fuzzed past the ownership check). Checks: no 5xx
(bad input must get a 4xx, never a 500), and every status and body is one the description
documents.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from tests.cluster import (
    AGENT_TOKEN,
    Cluster,
    cluster_dir,
    create_pg_database,
    drop_pg_database,
    release_cluster_dir,
    wait_for,
)

pytestmark = pytest.mark.integration  # a real cluster (its own fixture, not cluster_factory)

# Cases per operation in the fuzzing phase (the coverage phase adds its own boundary cases).
# DET_FUZZ_EXAMPLES raises it for a longer hunt; the default keeps the run to a few minutes.
MAX_EXAMPLES = int(os.environ.get("DET_FUZZ_EXAMPLES", "20"))
# No 5xx; and every answer is one the description documents (status and body), so the
# description stays true to what the master does.
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
# Long polls are bounded so a case costs at most this (the spec allows up to 60-300 s).
LONG_POLL_CAP_S = 0.2

CONFIG = """
name: fuzz-seed
entrypoint: {python} train.py
hyperparameters: {{lr: 0.1}}
searcher: {{name: single, metric: loss, max_length: {{batches: 987654}}}}
checkpoint_storage: {{type: shared_fs, host_path: {ckpts}}}
max_restarts: 0
"""
# The seeded trial hands its session token to the test, then waits to be fuzzed. Its odd length
# keeps a fuzzed completed_operation from finishing it (the master would then stop it, and its
# token would end with it).
TRAIN = """
import json, os, time
with open({out!r} + ".tmp", "w") as f:
    json.dump({{k: os.environ[k] for k in ("DET_SESSION_TOKEN", "DET_TRIAL_ID",
                                           "DET_ALLOCATION_ID", "DET_EXPERIMENT_ID")}}, f)
os.rename({out!r} + ".tmp", {out!r})
time.sleep(3600)
"""

schema = (
    schemathesis.pytest.from_fixture("api_schema")
    # Logging out revokes the very token the fuzzer sends, and would turn the rest into 401s.
    .exclude(method="POST", path="/auth/logout")
    # Could deactivate or demote the admin the fuzzer acts as (same reason); the route's input
    # handling is covered by the user tests.
    .exclude(method="PATCH", path="/users/{username}")
)


def _model_def(script: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = script.encode()
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Target:
    """The fuzzed cluster and the running trial whose session token the harness routes get."""

    def __init__(self, cluster: Cluster, trial: dict[str, str]) -> None:
        self.cluster = cluster
        self.session_token = trial["DET_SESSION_TOKEN"]
        self.trial_id = int(trial["DET_TRIAL_ID"])
        self.allocation_id = trial["DET_ALLOCATION_ID"]
        self.experiment_id = int(trial["DET_EXPERIMENT_ID"])
        self.other_experiment_id = 0
        self.other_trial_id = 0


def _seed(c: Cluster, tmp: Path) -> Target:
    """A running trial (its token written to a file), a second experiment, a template, a model."""
    # The trial runs as its own Unix identity: it hands its token over through a sticky,
    # world-writable directory (like /tmp), the test reading it as root.
    drop = tmp / "seed"
    drop.mkdir()
    drop.chmod(0o1777)
    out = drop / "session.json"
    config = CONFIG.format(python=sys.executable, ckpts=tmp / "ckpts")
    exp_ids = []
    for script in (TRAIN.format(out=str(out)), "print('hello')\n"):
        r = c.request(
            "POST",
            "/experiments",
            data={"config": config},
            files={"model_def": ("model.tar.gz", _model_def(script))},
        )
        assert r.status_code == 201, r.text
        exp_ids.append(r.json()["experiment"]["id"])
        if len(exp_ids) == 1:  # the second must not take the only slot first
            wait_for(out.exists, 120, what="the seeded trial's session token")
    r = c.request("PUT", "/templates/base", json={"config": {"description": "t"}})
    assert r.status_code in (200, 201), r.text
    r = c.request("POST", "/models", json={"name": "m1"})
    assert r.status_code == 201, r.text
    target = Target(c, json.loads(out.read_text()))
    target.other_experiment_id = exp_ids[1]

    def other_trial() -> int | None:
        r = c.request("GET", f"/experiments/{exp_ids[1]}/trials")
        trials = r.json().get("trials") or [] if r.status_code == 200 else []
        return int(trials[0]["id"]) if trials else None

    target.other_trial_id = wait_for(other_trial, 60, what="the second experiment's trial")
    return target


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    url = create_pg_database()
    base = Path(tmp_path_factory.mktemp("fuzz"))
    # Trials run as another Unix identity: the cluster lives where that identity can reach it.
    tmp = cluster_dir(base, "cluster")
    # A failed login costs a full password hash whoever is named (constant-time logins, issue
    # 37): capping one address's failures keeps the fuzzer's login cases from spending the run
    # hashing. Each case is still parsed and checked; past the cap the answer is a 429.
    c = Cluster(tmp, url, master_yaml="login_throttle: {max_failures_per_address: 10}\n")
    try:
        c.start_master()
        c.start_agent("agent-1", slots=1)
        yield _seed(c, tmp)
    finally:
        c.stop()
        drop_pg_database(url)
        release_cluster_dir(base, "cluster")


@pytest.fixture(scope="module")
def api_schema(fuzz_target: Target) -> Any:
    url = fuzz_target.cluster.url + "/api/v1/openapi.json"
    loaded = schemathesis.openapi.from_url(url, timeout=30)
    loaded.config.generation.update(
        max_examples=MAX_EXAMPLES,
        modes=["positive", "negative"],
        with_security_parameters=False,  # the test sends real tokens (below)
    )
    return loaded


def _token_for(case: Any, target: Target) -> str:
    """The token the operation's description lists first (see master/api/openapi.yaml)."""
    security = case.operation.definition.raw.get("security") or [{"userToken": []}]
    first = next(iter(security[0]), "userToken")
    if first == "agentToken":
        return AGENT_TOKEN
    if first == "sessionToken":
        _aim_at_the_trial(case, target)
        return target.session_token
    _spare_the_running_trial(case, target)
    return target.cluster.token


def _aim_at_the_trial(case: Any, target: Target) -> None:
    """Harness routes: the token's own trial and allocation, so the body is what gets fuzzed."""
    params = case.path_parameters if isinstance(case.path_parameters, dict) else {}
    if "trial_id" in params:
        params["trial_id"] = target.trial_id
    if "alloc_id" in params:
        params["alloc_id"] = target.allocation_id
    if isinstance(case.body, dict) and isinstance(case.body.get("trial_id"), int):
        case.body["trial_id"] = target.trial_id


def _spare_the_running_trial(case: Any, target: Target) -> None:
    """Steering the seeded trial's experiment or job (pause, kill, max_slots: 0, another pool)
    would end the trial whose token the harness routes use: such writes go to the other one."""
    if case.method.upper() == "GET":
        return
    params = case.path_parameters if isinstance(case.path_parameters, dict) else {}
    if str(params.get("exp_id")) == str(target.experiment_id):
        params["exp_id"] = target.other_experiment_id
    if str(params.get("job_id")) == str(target.experiment_id):
        params["job_id"] = str(target.other_experiment_id)
    # Killing the seeded trial itself (POST /trials/{trial_id}/kill) ends its token likewise.
    path = str(getattr(case, "path", ""))
    if path.endswith("/kill") and str(params.get("trial_id")) == str(target.trial_id):
        params["trial_id"] = target.other_trial_id


def _cap_long_polls(case: Any) -> None:
    """Long polls wait at most LONG_POLL_CAP_S, also where the case leaves the default (30-60 s)."""
    declared = any(
        p.name == "timeout" and p.location == "query" for p in case.operation.iter_parameters()
    )
    query = case.query if isinstance(case.query, dict) else {}
    if declared or "timeout" in query:
        try:  # a valid wait is capped; an invalid one stays, to be fuzzed (it gets a 400)
            long = "timeout" not in query or not float(query["timeout"]) <= LONG_POLL_CAP_S
        except (TypeError, ValueError):
            long = False
        if long:
            case.query = {**query, "timeout": LONG_POLL_CAP_S}
    if isinstance(case.body, dict) and "wait" in case.body:
        case.body["wait"] = LONG_POLL_CAP_S


@schema.parametrize()
@pytest.mark.timeout(max(300, 10 * MAX_EXAMPLES))  # a longer hunt gets the time it needs
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    # The same cases every run, so a failure reproduces; DET_FUZZ_RANDOM=1 hunts for new ones.
    derandomize=os.environ.get("DET_FUZZ_RANDOM") != "1",
    suppress_health_check=list(HealthCheck),
)
def test_no_request_gets_a_server_error(case: Any, fuzz_target: Target) -> None:
    _cap_long_polls(case)
    headers = {"Authorization": f"Bearer {_token_for(case, fuzz_target)}"}
    case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)


def test_the_harness_routes_were_fuzzed_with_a_live_session_token(fuzz_target: Target) -> None:
    """Runs after the fuzzing: the seeded trial's token still works, so the harness routes'
    cases reached their handlers rather than stopping at a 401."""
    r = requests.get(
        f"{fuzz_target.cluster.url}/api/v1/trials/{fuzz_target.trial_id}/searcher/operation",
        headers={"Authorization": f"Bearer {fuzz_target.session_token}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
