"""On-cluster Core API against a fake master: searcher loop, preemption, InvalidHP, checkpoints."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import jsonify, request

import harness
from harness import core
from harness.api.testing import FakeMaster, api_error


class Master:
    """A fake master with the harness routes of one trial (17) and allocation (a-1)."""

    def __init__(self, fake: FakeMaster) -> None:
        self.fake = fake
        self.ops: list[dict[str, Any]] = []  # replies of GET searcher/operation, in order
        self.preempt = threading.Event()
        self.metrics: list[dict[str, Any]] = []
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.metrics_status: int | None = None
        # Seconds a metrics POST waits for a checkpoint registration before it is taken
        # (0: at once), and the order in which the two were taken.
        self.hold_metrics = 0.0
        self.registered = threading.Event()
        self.taken: list[str] = []
        app = fake.app

        @app.get("/api/v1/trials/17/searcher/operation")
        def op() -> Any:
            return jsonify(self.ops.pop(0) if self.ops else {"operation": None, "completed": True})

        @app.post("/api/v1/trials/17/searcher/completed_operation")
        def completed() -> Any:
            return jsonify({})

        @app.post("/api/v1/trials/17/metrics")
        def metrics() -> Any:
            if self.metrics_status:
                return api_error(self.metrics_status, "unauthenticated", "allocation ended")
            if self.hold_metrics:
                self.registered.wait(self.hold_metrics)
            self.metrics.extend(request.get_json()["reports"])
            self.taken.append("metrics")
            return jsonify(accepted=len(request.get_json()["reports"]))

        @app.post("/api/v1/trials/17/progress")
        def progress() -> Any:
            return jsonify({})

        @app.post("/api/v1/trials/17/early_exit")
        def early_exit() -> Any:
            return jsonify({})

        @app.get("/api/v1/allocations/a-1/preemption")
        def preemption() -> Any:
            self.preempt.wait(min(float(request.args.get("timeout", 30)), 0.5))
            return jsonify(preempt=self.preempt.is_set())

        @app.post("/api/v1/allocations/a-1/ack_preemption")
        def ack() -> Any:
            return jsonify({})

        @app.post("/api/v1/checkpoints")
        def register() -> Any:
            body = request.get_json()
            self.checkpoints[body["uuid"]] = body
            self.taken.append("checkpoint")
            self.registered.set()
            return jsonify(checkpoint=body), 201

        @app.get("/api/v1/checkpoints/<uuid>")
        def get_ckpt(uuid: str) -> Any:
            if uuid not in self.checkpoints:
                return api_error(404, "not_found", f"no checkpoint {uuid}")
            return jsonify(checkpoint=self.checkpoints[uuid])

    def paths(self) -> list[str]:
        return [f"{c.method} {c.path}" for c in self.fake.calls]


@pytest.fixture
def master(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Master]:
    with FakeMaster() as fake:
        config = {
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": str(tmp_path / "fs"),
                "storage_path": "ckpts",
            }
        }
        env = {
            "DET_MASTER": fake.url,
            "DET_SESSION_TOKEN": "sess",
            "DET_TRIAL_ID": "17",
            "DET_EXPERIMENT_ID": "3",
            "DET_ALLOCATION_ID": "a-1",
            "DET_TRIAL_SEED": "1",
            "DET_HPARAMS": '{"lr": 0.1}',
            "DET_EXPERIMENT_CONFIG": json.dumps(config),
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        yield Master(fake)


def test_searcher_loop_and_metrics_order(master: Master) -> None:
    master.ops = [
        {"operation": {"length": 10}, "completed": False},
        {"operation": None, "completed": False},  # searcher still deciding: poll again
        {"operation": {"length": 20}, "completed": False},
    ]
    lengths = []
    with core.init() as ctx:
        assert ctx.info is not None and ctx.info.trial.hparams == {"lr": 0.1}
        for op in ctx.searcher.operations():
            ctx.train.report_training_metrics(op.length, {"loss": 1.0})
            ctx.train.report_validation_metrics(op.length, {"val_loss": 0.5})
            op.report_progress(op.length)
            op.report_completed(0.5)
            lengths.append(op.length)
    assert lengths == [10, 20]
    paths = master.paths()
    done = [i for i, p in enumerate(paths) if p.endswith("completed_operation")]
    last_metrics = max(i for i, p in enumerate(paths) if p.endswith("/metrics"))
    assert len(done) == 2 and last_metrics < done[-1]  # metrics flushed before completion
    assert [m["steps_completed"] for m in master.metrics] == [10, 10, 20, 20]
    body = master.fake.calls_to("completed_operation")[0].json
    assert body == {"length": 10, "searcher_metric": 0.5}
    auth = master.fake.calls_to("/metrics")[0].headers["Authorization"]
    assert auth == "Bearer sess"


def test_moving_on_without_report_completed(master: Master) -> None:
    master.ops = [{"operation": {"length": 10}, "completed": False}]
    with pytest.raises(RuntimeError, match="report_completed"), core.init() as ctx:
        for _op in ctx.searcher.operations():
            pass


def test_preemption_flag_and_single_ack(master: Master) -> None:
    with core.init() as ctx:
        assert ctx.preempt.should_preempt() is False
        master.preempt.set()
        deadline = time.monotonic() + 30
        while not ctx.preempt.should_preempt():
            assert time.monotonic() < deadline, "preemption never seen"
            time.sleep(0.01)
        assert ctx.preempt.should_preempt() is True
    assert len(master.fake.calls_to("/ack_preemption", "POST")) == 1


def test_should_preempt_does_no_io(master: Master) -> None:
    # Cheap by construction: the flag is read locally; only the watcher thread asks the master
    # (one long poll at a time). Counted in requests, not seconds (speed figures live in bench/).
    with core.init() as ctx:
        before = len(master.fake.calls)
        for _ in range(100_000):
            ctx.preempt.should_preempt()
        asked = len(master.fake.calls) - before
        assert asked < 100, f"{asked} requests during 100,000 should_preempt() calls"


def test_invalid_hp_reports_early_exit(master: Master) -> None:
    with core.init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 9.9})
        raise harness.InvalidHP("lr out of range")
    calls = master.fake.calls_to("/early_exit")
    assert len(calls) == 1 and calls[0].json == {"reason": "INVALID_HP"}
    assert len(master.metrics) == 1


def test_checkpoint_registered_on_cluster(master: Master, tmp_path: Path) -> None:
    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 30, "epoch": 1}) as (path, uuid):
            (path / "model.pt").write_bytes(b"x" * 10)
            (path / "sub").mkdir()
            (path / "sub" / "opt.pt").write_bytes(b"y" * 3)
        assert path == tmp_path / "fs" / "ckpts" / uuid
        reg = master.checkpoints[uuid]
        assert reg["trial_id"] == 17 and reg["steps_completed"] == 30
        assert reg["state"] == "COMPLETED"
        assert reg["metadata"] == {"steps_completed": 30, "epoch": 1}
        assert reg["resources"] == {"model.pt": 10, "sub/opt.pt": 3, "metadata.json": 41}
        assert ctx.checkpoint.get_metadata(uuid)["epoch"] == 1
        with ctx.checkpoint.restore_path(uuid) as p:
            assert (p / "sub" / "opt.pt").read_bytes() == b"yyy"


def test_a_checkpoint_is_registered_only_after_the_metrics_reported_before_it(
    master: Master,
) -> None:
    # A trial that dies right after registering a checkpoint resumes from it and never reports
    # what came before it again: a validation still queued in the shipper would be lost. The
    # fake master holds the metrics POST until a checkpoint is registered (at most 1 s): on
    # the old code the registration overtook the queued validation.
    master.hold_metrics = 1.0
    with core.init() as ctx:
        ctx.train.report_validation_metrics(30, {"loss": 0.5})
        with ctx.checkpoint.store_path({"steps_completed": 30}) as (path, _uuid):
            (path / "model.pt").write_bytes(b"x")
    assert master.taken == ["metrics", "checkpoint"], master.taken


def test_missing_storage_config_is_a_clear_error(
    master: Master, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DET_EXPERIMENT_CONFIG", "{}")
    with core.init() as ctx, pytest.raises(ValueError, match="checkpoint_storage"):
        ctx.checkpoint.upload(tmp_path, {"steps_completed": 1})


def test_rejected_token_orphans_the_trial(master: Master) -> None:
    master.metrics_status = 401
    orphaned = threading.Event()
    with core.init(on_orphaned=lambda msg: orphaned.set()) as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1})
        assert orphaned.wait(5)


def test_core_api_calls_ride_out_a_master_restart(master: Master) -> None:
    """The master goes away between operations: asking for the next operation, completing it and
    registering a checkpoint wait for it (DET_MASTER_OUTAGE_S) instead of failing the trial."""
    master.ops = [
        {"operation": {"length": 10}, "completed": False},
        {"operation": {"length": 20}, "completed": False},
    ]
    lengths = []

    def restart() -> None:
        master.fake.stop()  # connection refused for a while
        threading.Timer(1.5, master.fake.start).start()

    with core.init() as ctx:
        for op in ctx.searcher.operations():
            if op.length == 20:
                restart()
                with ctx.checkpoint.store_path({"steps_completed": 20}) as (path, uuid):
                    (path / "model.pt").write_bytes(b"w")
                assert uuid in master.checkpoints
            op.report_completed(0.5)
            lengths.append(op.length)
            if op.length == 10:
                restart()  # the next operation is asked for while the master is away
    assert lengths == [10, 20]
    assert len(master.fake.calls_to("completed_operation")) == 2
