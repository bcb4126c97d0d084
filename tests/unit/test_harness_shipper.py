"""The metrics hot path against a fake master: batching, order, outages, flush, rejections."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask import jsonify, request

from harness.api import Client, Session
from harness.api.testing import FakeMaster, api_error
from harness.core import _shipper
from harness.core._shipper import MetricsShipper


class Metrics:
    """The fake master's metrics route: records every report; can be slowed or made picky."""

    def __init__(self, fake: FakeMaster) -> None:
        self.reports: list[dict[str, Any]] = []
        self.batches: list[int] = []
        self.progress: list[float] = []
        self.delay = 0.0
        self.reject_step: int | None = None
        self.status: int | None = None
        self.gate: threading.Event | None = None  # when set, requests wait for it
        self.lock = threading.Lock()

        @fake.app.post("/api/v1/trials/<int:tid>/metrics")
        def metrics(tid: int) -> Any:
            if self.status:
                return api_error(self.status, "x", "nope")
            body = request.get_json()
            reports = body["reports"]
            if self.reject_step is not None and any(
                r["steps_completed"] == self.reject_step for r in reports
            ):
                return api_error(400, "validation", "bad report", "reports[0].metrics")
            time.sleep(self.delay)
            if self.gate is not None:
                self.gate.wait(60)
            with self.lock:
                self.reports.extend(reports)
                self.batches.append(len(reports))
            return jsonify(accepted=len(reports))

        @fake.app.post("/api/v1/trials/<int:tid>/progress")
        def progress(tid: int) -> Any:
            self.progress.append(request.get_json()["progress"])
            return jsonify({})


@pytest.fixture
def fake() -> Iterator[FakeMaster]:
    with FakeMaster() as f:
        yield f


def _shipper_for(fake: FakeMaster, orphaned: list[str] | None = None) -> MetricsShipper:
    sink = orphaned if orphaned is not None else []
    return MetricsShipper(Client(Session(fake.url, "tok")), 7, sink.append)


def test_batches_are_large_ordered_and_complete(fake: FakeMaster) -> None:
    m = Metrics(fake)
    m.delay = 0.05  # while one request is in flight, the next batch accumulates
    s = _shipper_for(fake)
    n = 12_000
    for i in range(n):
        s.report("training", i, {"loss": 1.0 / (i + 1)})
    assert s.flush(timeout=30)
    assert [r["steps_completed"] for r in m.reports] == list(range(n))
    assert max(m.batches) <= 5000
    assert len(m.batches) < 20  # coalesced, not one request per report
    assert all(r["group"] == "training" and "reported_at" in r for r in m.reports)
    s.close()


def test_report_never_waits_for_the_master(fake: FakeMaster) -> None:
    # The training loop's side does no I/O: 50k reports return while the master holds every
    # request (nothing recorded yet), whatever the machine's load. Speed is in bench/.
    m = Metrics(fake)
    m.gate = threading.Event()
    s = _shipper_for(fake)
    for i in range(50_000):
        s.report("training", i, {"loss": 0.1})
    assert m.reports == [], "a report waited for the master's answer"
    m.gate.set()
    assert s.close(timeout=120)
    assert [r["steps_completed"] for r in m.reports] == list(range(50_000))


def test_nothing_lost_across_an_outage(fake: FakeMaster) -> None:
    m = Metrics(fake)
    s = _shipper_for(fake)
    s.report("training", 0, {"loss": 1})
    assert s.flush(timeout=60)
    fake.stop()  # master down: connection refused
    for i in range(1, 200):
        s.report("validation" if i % 10 == 0 else "training", i, {"loss": i})
    assert not s.flush(timeout=0.3)
    fake.start()  # same port
    assert s.flush(timeout=60)
    assert [r["steps_completed"] for r in m.reports] == list(range(200))
    assert m.reports[10]["group"] == "validation"
    s.close()


def test_server_errors_are_retried(fake: FakeMaster) -> None:
    m = Metrics(fake)
    m.status = 503
    s = _shipper_for(fake)
    s.report("training", 1, {"a": 1})
    time.sleep(0.3)
    m.status = None
    assert s.flush(timeout=60)
    assert [r["steps_completed"] for r in m.reports] == [1]
    s.close()


def test_one_bad_report_does_not_sink_its_batch(fake: FakeMaster) -> None:
    m = Metrics(fake)
    m.reject_step = 13
    s = _shipper_for(fake)
    for i in range(40):
        s.report("training", i, {"x": i})
    assert s.flush(timeout=60)
    assert [r["steps_completed"] for r in m.reports] == [i for i in range(40) if i != 13]
    assert s.dropped == 1
    s.close()


def test_nonfinite_and_tensor_like_values(fake: FakeMaster) -> None:
    m = Metrics(fake)

    class Scalar:
        def item(self) -> float:
            return 2.5

    s = _shipper_for(fake)
    s.report("training", 1, {"nan": float("nan"), "inf": float("inf"), "t": Scalar()})
    assert s.flush(timeout=60)
    assert m.reports[0]["metrics"] == {"nan": "NaN", "inf": "Infinity", "t": 2.5}
    s.close()


def test_reported_dict_is_copied(fake: FakeMaster) -> None:
    m = Metrics(fake)
    m.delay = 0.2
    s = _shipper_for(fake)
    d = {"loss": 1}
    s.report("training", 1, d)
    d["loss"] = 2  # the user reuses their dict
    assert s.flush(timeout=60)
    assert m.reports[0]["metrics"] == {"loss": 1}
    s.close()


def test_progress_is_coalesced_and_flushed(fake: FakeMaster) -> None:
    m = Metrics(fake)
    s = _shipper_for(fake)
    for i in range(1, 101):
        s.set_progress(i / 100)
    assert s.flush(timeout=60)
    assert m.progress[-1] == 1.0
    assert len(m.progress) < 100
    s.close()


def test_unauthenticated_means_orphaned(fake: FakeMaster) -> None:
    m = Metrics(fake)
    m.status = 401
    orphaned: list[str] = []
    s = _shipper_for(fake, orphaned)
    s.report("training", 1, {"a": 1})
    s.flush(timeout=5)  # returns: the shipper is dead, not hung
    assert orphaned and "session token" in orphaned[0]


def test_batch_cap(fake: FakeMaster, monkeypatch: pytest.MonkeyPatch) -> None:
    m = Metrics(fake)
    m.delay = 0.05
    s = MetricsShipper(Client(Session(fake.url, "t")), 7, lambda msg: None, max_batch=10)
    for i in range(55):
        s.report("training", i, {})
    assert s.flush(timeout=60)
    assert max(m.batches) <= 10 and sum(m.batches) == 55
    assert _shipper.MAX_BATCH == 5000
    s.close()
