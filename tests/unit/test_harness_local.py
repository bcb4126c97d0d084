"""Off-cluster `harness.core.init()`: everything works locally so scripts can be debugged."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import harness
from harness import core


@pytest.fixture(autouse=True)
def _off_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k in ("DET_MASTER", "DET_TRIAL_ID", "DET_MAX_LENGTH"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)


def test_metrics_go_to_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="harness")
    with core.init() as ctx:
        ctx.train.report_training_metrics(10, {"loss": 0.5})
        ctx.train.report_validation_metrics(10, {"acc": 0.9})
        ctx.train.report_progress(0.5)
    assert "training metrics at 10 steps" in caplog.text
    assert "'acc': 0.9" in caplog.text


def test_metric_arguments_are_checked() -> None:
    with core.init() as ctx:
        with pytest.raises(TypeError, match="steps_completed"):
            ctx.train.report_training_metrics(1.5, {"loss": 1})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="metrics"):
            ctx.train.report_validation_metrics(1, [1, 2])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="progress"):
            ctx.train.report_progress(2.0)


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "model.bin").write_bytes(b"weights")
    (src / "sub" / "opt.bin").write_bytes(b"opt")
    with core.init() as ctx:
        uuid = ctx.checkpoint.upload(src, {"steps_completed": 5, "note": "hi"})
        stored = tmp_path / "checkpoints" / uuid
        assert (stored / "model.bin").read_bytes() == b"weights"
        assert (stored / "metadata.json").exists()
        assert ctx.checkpoint.get_metadata(uuid) == {"steps_completed": 5, "note": "hi"}

        out = tmp_path / "out"
        ctx.checkpoint.download(uuid, out)
        assert (out / "sub" / "opt.bin").read_bytes() == b"opt"

        with ctx.checkpoint.store_path({"steps_completed": 7}) as (path, uuid2):
            (path / "w.txt").write_text("seven")
        assert uuid2 != uuid
        with ctx.checkpoint.restore_path(uuid2) as path:
            assert (path / "w.txt").read_text() == "seven"
        assert ctx.checkpoint.get_metadata(uuid2)["steps_completed"] == 7


def test_store_path_failure_leaves_nothing(tmp_path: Path) -> None:
    with core.init() as ctx:
        with pytest.raises(OSError), ctx.checkpoint.store_path({"steps_completed": 1}) as (p, u):
            (p / "half").write_text("x")
            raise OSError("disk full")
        assert not (tmp_path / "checkpoints" / u).exists()


def test_checkpoint_storage_override(tmp_path: Path) -> None:
    ctx = core.init(checkpoint_storage=str(tmp_path / "elsewhere"))
    with ctx, ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
        (path / "x").write_text("1")
    assert (tmp_path / "elsewhere" / uuid / "x").exists()


def test_metadata_needs_steps_completed(tmp_path: Path) -> None:
    with core.init() as ctx:
        with pytest.raises(ValueError, match="steps_completed"):
            ctx.checkpoint.upload(tmp_path, {"epoch": 1})
        with pytest.raises(ValueError, match="steps_completed"), ctx.checkpoint.store_path({}):
            pass


def test_searcher_one_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_MAX_LENGTH", "100")
    with core.init() as ctx:
        ops = []
        for op in ctx.searcher.operations():
            op.report_progress(50)
            op.report_completed(0.25)
            ops.append(op.length)
    assert ops == [100]


def test_searcher_default_length_is_one() -> None:
    with core.init() as ctx:
        assert [op.length for op in _complete_all(ctx)] == [1]


def _complete_all(ctx: core.Context) -> list[core.SearcherOperation]:
    done = []
    for op in ctx.searcher.operations():
        op.report_completed(0.0)
        done.append(op)
    return done


def test_forgetting_report_completed_is_an_error() -> None:
    with core.init() as ctx, pytest.raises(RuntimeError, match="report_completed"):
        for _op in ctx.searcher.operations():
            pass


def test_preempt_and_distributed() -> None:
    with core.init() as ctx:
        assert ctx.preempt.should_preempt() is False
        d = ctx.distributed
        assert (d.rank, d.size, d.local_rank, d.local_size, d.cross_rank, d.cross_size) == (
            0,
            1,
            0,
            1,
            0,
            1,
        )
        assert d.allgather("x") == ["x"]
        assert d.broadcast(3) == 3
        assert d.gather({"a": 1}) == [{"a": 1}]
        assert d.allgather_local(1) == [1]
        assert ctx.info is None


def test_invalid_hp_is_suppressed() -> None:
    with core.init():
        raise harness.InvalidHP("lr too big")


def test_user_errors_propagate_untouched() -> None:
    with pytest.raises(ZeroDivisionError), core.init():
        1 / 0  # noqa: B018
