"""`Client` error mapping, envelopes, log following; the auth token cache."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Response, jsonify, request

from harness.api import (
    APIError,
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    MasterUnreachable,
    NotFound,
    Session,
    TooLarge,
    Unauthenticated,
    auth,
)
from harness.api.testing import FakeMaster, api_error


@pytest.fixture
def fake() -> Iterator[FakeMaster]:
    with FakeMaster() as f:
        yield f


@pytest.mark.parametrize(
    ("status", "exc"),
    [
        (400, BadRequest),
        (401, Unauthenticated),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (413, TooLarge),
        (500, APIError),
    ],
)
def test_error_mapping(fake: FakeMaster, status: int, exc: type[APIError]) -> None:
    @fake.app.get("/api/v1/trials/1")
    def trial() -> Any:
        return api_error(status, "code", "went wrong", "searcher.metric")

    with pytest.raises(exc) as info:
        Client(Session(fake.url, "t")).get_trial(1)
    assert info.value.status == status
    assert info.value.message == "went wrong"
    assert info.value.path == "searcher.metric"


def test_non_json_error(fake: FakeMaster) -> None:
    @fake.app.get("/api/v1/agents")
    def agents() -> Any:
        return Response("bad gateway", status=502)

    with pytest.raises(APIError, match="HTTP 502: bad gateway"):
        Client(Session(fake.url)).list_agents()


def test_unreachable_names_the_url() -> None:
    with pytest.raises(MasterUnreachable, match=r"http://127\.0\.0\.1:9: connection refused"):
        Client.connect("127.0.0.1:9").health()


def test_envelopes_are_unwrapped(fake: FakeMaster) -> None:
    exp = {"id": 4, "state": "ACTIVE"}

    @fake.app.post("/api/v1/experiments/4/pause")
    def pause() -> Any:
        return jsonify(experiment={**exp, "state": "PAUSED"})

    @fake.app.get("/api/v1/experiments")
    def exps() -> Any:
        off = int(request.args["offset"])
        return jsonify(experiments=[{"id": i} for i in range(off, min(off + 2, 5))], total=5)

    c = Client(Session(fake.url, "t"))
    assert c.pause_experiment(4)["state"] == "PAUSED"
    assert [e["id"] for e in c.iter_experiments(page=2)] == [0, 1, 2, 3, 4]
    assert fake.calls_to("/experiments")[0].args["limit"] == "2"


def test_create_experiment_is_multipart(fake: FakeMaster) -> None:
    seen: dict[str, Any] = {}

    @fake.app.post("/api/v1/experiments")
    def create() -> Any:
        seen["config"] = request.form["config"]
        seen["model_def"] = request.files["model_def"].read()
        seen["activate"] = request.args["activate"]
        return jsonify(experiment={"id": 9}), 201

    c = Client(Session(fake.url, "t"))
    assert c.create_experiment("name: x\n", b"tarbytes", activate=False)["id"] == 9
    assert seen == {"config": "name: x\n", "model_def": b"tarbytes", "activate": "false"}


def test_follow_trial_logs_until_done(fake: FakeMaster) -> None:
    lines = [{"seq": i, "line": f"line {i}"} for i in range(1, 6)]

    @fake.app.get("/api/v1/trials/2/logs")
    def logs() -> Any:
        after = int(request.args["after"])
        assert request.args["follow"] == "true"
        page = [ln for ln in lines if ln["seq"] > after][:2]
        last = page[-1]["seq"] if page else after
        return jsonify(logs=page, last_seq=last, done=last >= 5)

    got = list(Client(Session(fake.url, "t")).follow_trial_logs(2))
    assert [g["line"] for g in got] == [f"line {i}" for i in range(1, 6)]


def test_login_sets_token(fake: FakeMaster) -> None:
    @fake.app.post("/api/v1/auth/login")
    def login() -> Any:
        return jsonify(token="T1", user={"username": request.get_json()["username"]})

    @fake.app.get("/api/v1/me")
    def me() -> Any:
        assert request.headers["Authorization"] == "Bearer T1"
        return jsonify(user={"username": "ann"})

    c = Client(Session(fake.url))
    c.login("ann", "pw")
    assert c.me()["username"] == "ann"


# ---- auth cache ----------------------------------------------------------------------------


@pytest.fixture
def cfg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("DET_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.delenv("DET_USER", raising=False)
    monkeypatch.delenv("DET_PASSWORD", raising=False)
    return tmp_path / "cfg"


def test_token_cache(cfg: Path) -> None:
    auth.save_token("127.0.0.1:8080/", "ann", "tokA")
    auth.save_token("http://127.0.0.1:8080", "bob", "tokB")
    path = cfg / "auth.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert auth.cached_token("http://127.0.0.1:8080") == ("bob", "tokB")
    assert auth.cached_token("http://127.0.0.1:8080", "ann") == ("ann", "tokA")
    assert auth.cached_token("http://other:8080") is None
    assert auth.remove_token("http://127.0.0.1:8080") == "bob"
    assert auth.cached_token("http://127.0.0.1:8080") is None


def test_login_session_sources(
    cfg: Path, fake: FakeMaster, monkeypatch: pytest.MonkeyPatch
) -> None:
    @fake.app.post("/api/v1/auth/login")
    def login() -> Any:
        body = request.get_json()
        if body["password"] != "pw":
            return api_error(401, "unauthenticated", "bad username or password")
        return jsonify(token="ENV", user={"username": body["username"]})

    with pytest.raises(Unauthenticated, match="det user login NAME"):
        auth.login_session(fake.url)
    auth.save_token(fake.url, "ann", "CACHED")
    assert auth.login_session(fake.url).token == "CACHED"
    monkeypatch.setenv("DET_USER", "ci")
    monkeypatch.setenv("DET_PASSWORD", "pw")
    assert auth.login_session(fake.url).token == "ENV"
    monkeypatch.setenv("DET_PASSWORD", "wrong")
    with pytest.raises(Unauthenticated, match="bad username"):
        auth.login_session(fake.url)
