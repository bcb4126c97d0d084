"""The harness rides out a master outage: which calls retry, for how long, and how they back off."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from flask import jsonify

from harness.api import (
    APIError,
    BadRequest,
    MasterUnreachable,
    Session,
    call_through_outage,
    outage_from_env,
)
from harness.api.testing import FakeMaster, api_error


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    def __call__(self) -> float:
        return self.now


def _failing(outcomes: list[Exception | None]) -> Any:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if outcomes:
            err = outcomes.pop(0)
            if err is not None:
                raise err
        return "ok"

    call.calls = calls  # type: ignore[attr-defined]
    return call


def test_transient_failures_are_retried_with_backoff_until_the_master_answers() -> None:
    clock = FakeClock()
    call = _failing([MasterUnreachable("refused"), APIError(502, "bad gateway")] * 3)
    assert call_through_outage(call, 60, "x", sleep=clock.sleep, clock=clock) == "ok"
    assert len(call.calls) == 7
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]  # doubling, capped


def test_retry_after_is_honoured_and_capped() -> None:
    clock = FakeClock()
    busy = APIError(503, "database unavailable")
    busy.retry_after = 2.0
    long = APIError(503, "database unavailable")
    long.retry_after = 3600.0
    call = _failing([busy, long])
    call_through_outage(call, 60, "x", sleep=clock.sleep, clock=clock)
    assert clock.sleeps == [2.0, 5.0]


def test_a_client_error_is_never_retried() -> None:
    clock = FakeClock()
    call = _failing([BadRequest(400, "bad")])
    with pytest.raises(BadRequest):
        call_through_outage(call, 60, "x", sleep=clock.sleep, clock=clock)
    assert len(call.calls) == 1 and clock.sleeps == []


def test_an_outage_longer_than_the_budget_fails_the_call() -> None:
    clock = FakeClock()
    call = _failing([MasterUnreachable("refused")] * 100)
    with pytest.raises(MasterUnreachable):
        call_through_outage(call, 10, "x", sleep=clock.sleep, clock=clock)
    assert sum(clock.sleeps) <= 10 and len(call.calls) > 3


def test_outage_budget_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_MASTER_OUTAGE_S", raising=False)
    assert outage_from_env() == 120.0
    monkeypatch.setenv("DET_MASTER_OUTAGE_S", "7.5")
    assert outage_from_env() == 7.5
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv("DET_MASTER_OUTAGE_S", bad)
        with pytest.raises(ValueError, match="DET_MASTER_OUTAGE_S"):
            outage_from_env()


def test_session_retries_safe_calls_across_a_master_restart_and_a_503() -> None:
    """A real HTTP round trip: the master goes away (connection refused) and comes back on the
    same port, then answers 503 with Retry-After once; a GET and a write marked `retry` succeed,
    an unmarked write fails at once, and a session without a budget never retries."""
    fake = FakeMaster()
    state = {"busy": 1}

    @fake.app.get("/api/v1/thing")
    def thing() -> Any:
        if state["busy"]:
            state["busy"] -= 1
            resp = api_error(503, "unavailable", "the database is unavailable")
            resp.headers["Retry-After"] = "0.2"
            return resp
        return jsonify(ok=True)

    @fake.app.post("/api/v1/write")
    def write() -> Any:
        return jsonify(ok=True)

    with fake:
        session = Session(fake.url, outage_s=30)
        assert session.get("/thing") == {"ok": True}  # after one 503
        assert len(fake.calls_to("/thing")) == 2

        fake.stop()
        with pytest.raises(MasterUnreachable):  # not marked safe to repeat
            session.post("/write", {})
        with pytest.raises(MasterUnreachable):  # no budget: the CLI's behaviour
            Session(fake.url).get("/thing")
        back = threading.Timer(1.5, fake.start)
        back.start()
        try:
            assert session.post("/write", {}, retry=True) == {"ok": True}
        finally:
            back.join()
