"""TensorBoard files of a trial uploaded to each checkpoint storage (shared_fs, S3 on moto's
server, the GCS emulator) under Determined's experiment/trial layout, and read back."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from harness.core._distributed import DistributedContext
from harness.core._tensorboard import STORAGE_DIR, TensorboardManager
from harness.core._train import TensorboardMode, TrainContext
from harness.storage import build
from harness.tb_serve import fetch


@pytest.fixture(params=["shared_fs", "s3", "gcs"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "shared_fs":
        return {"type": "shared_fs", "host_path": str(tmp_path / "shared")}
    return dict(request.getfixturevalue(f"{request.param}_storage"))


def _scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """What TensorBoard's own reader makes of the events (it reads every scalar as a tensor)."""
    acc = EventAccumulator(str(directory))
    acc.Reload()
    return {
        tag: [(e.step, round(float(tensor_util.make_ndarray(e.tensor_proto)), 6)) for e in events]
        for tag in acc.Tags()["tensors"]
        for events in [acc.Tensors(tag)]
    }


def test_auto_mode_writes_reported_metrics_and_uploads_them(
    storage: dict[str, Any], tmp_path: Path
) -> None:
    tb = TensorboardManager(tmp_path / "local", lambda: build(storage), 3, 7)
    train = TrainContext(None, DistributedContext(), tensorboard=tb)
    train.report_training_metrics(10, {"loss": 0.5, "note": "text is left out"})
    train.report_validation_metrics(10, {"loss": 0.25})
    train.report_training_metrics(20, {"loss": 0.125})
    train.close_tensorboard()

    backend = build(storage)
    files = backend.list_files(STORAGE_DIR)
    assert files and all(f.startswith("experiment/3/trial/7/events.out.tfevents.") for f in files)
    fetched = tmp_path / "fetched"
    backend.download(STORAGE_DIR, fetched)
    got = _scalars(fetched / "experiment/3/trial/7")
    assert got == {
        "Determined/loss": [(10, 0.5), (20, 0.125)],
        "Determined/val_loss": [(10, 0.25)],
    }


def test_manual_uploads_only_what_changed_and_what_is_selected(
    storage: dict[str, Any], tmp_path: Path
) -> None:
    uploads: list[set[str]] = []
    backend = build(storage)
    real_upload = backend.upload

    def counting(src: Path, uuid: str, paths: set[str] | None = None) -> None:
        uploads.append(set(paths or ()))
        real_upload(src, uuid, paths)

    backend.upload = counting  # type: ignore[method-assign]
    tb = TensorboardManager(tmp_path / "local", lambda: backend, 4, 9, rank=1)
    train = TrainContext(
        None, DistributedContext(), tensorboard=tb, tensorboard_mode=TensorboardMode.MANUAL
    )
    path = train.get_tensorboard_path()
    train.report_training_metrics(1, {"loss": 1.0})  # MANUAL: no events written
    assert list(path.iterdir()) == []
    (path / "a.txt").write_text("one")
    (path / "sub").mkdir()
    (path / "sub" / "b.txt").write_text("two")
    (path / "skip.tmp").write_text("no")
    train.upload_tensorboard_files(selector=lambda p: p.suffix != ".tmp")
    train.upload_tensorboard_files(selector=lambda p: p.suffix != ".tmp")  # nothing new
    (path / "a.txt").write_text("one, longer")
    train.upload_tensorboard_files(selector=lambda p: p.suffix != ".tmp")
    root = "experiment/4/trial/9"
    assert uploads == [
        {f"{root}/a.txt.rank1", f"{root}/sub/b.txt.rank1"},
        {f"{root}/a.txt.rank1"},
    ]
    with backend.restore_path(STORAGE_DIR) as stored:
        assert (stored / root / "a.txt.rank1").read_text() == "one, longer"
        assert (stored / root / "sub/b.txt.rank1").read_text() == "two"
        assert not (stored / root / "skip.tmp.rank1").exists()
    # The staging copies and their transfer journals are gone.
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == ["experiment"]


def test_auto_uploads_never_block_the_training_thread(tmp_path: Path) -> None:
    storage = {"type": "shared_fs", "host_path": str(tmp_path / "shared")}
    backend = build(storage)
    real_upload = backend.upload
    release = threading.Event()
    started = threading.Event()

    def slow(src: Path, uuid: str, paths: set[str] | None = None) -> None:
        started.set()
        assert release.wait(30)
        real_upload(src, uuid, paths)

    backend.upload = slow  # type: ignore[method-assign]
    tb = TensorboardManager(tmp_path / "local", lambda: backend, 1, 2)
    train = TrainContext(None, DistributedContext(), tensorboard=tb)
    train.report_training_metrics(1, {"loss": 1.0})  # starts an upload that hangs
    assert started.wait(30)
    t0 = time.monotonic()
    train.report_training_metrics(2, {"loss": 0.5})  # still returns at once
    assert time.monotonic() - t0 < 1.0
    release.set()
    train.close_tensorboard()  # waits for it, then uploads the rest
    fetched = tmp_path / "fetched"
    build(storage).download(STORAGE_DIR, fetched)
    assert _scalars(fetched / "experiment/1/trial/2") == {"Determined/loss": [(1, 1.0), (2, 0.5)]}


def test_the_tensorboard_task_fetches_only_the_chosen_trials(
    storage: dict[str, Any], tmp_path: Path
) -> None:
    for trial_id, loss in ((11, 0.75), (12, 9.0)):
        tb = TensorboardManager(tmp_path / f"w{trial_id}", lambda: build(storage), 8, trial_id)
        train = TrainContext(None, DistributedContext(), tensorboard=tb)
        train.report_training_metrics(5, {"loss": loss})
        train.close_tensorboard()
    logdir = tmp_path / "logdir"
    sources = [{"experiment_id": 8, "trial_ids": [11], "storage": storage}]
    missing = [{"experiment_id": 99, "trial_ids": [1], "storage": storage}]
    assert fetch(sources + missing, logdir) == 1  # experiment 99 has no files: skipped
    assert sorted(p.name for p in (logdir / "experiment/8/trial").iterdir()) == ["11"]
    assert _scalars(logdir / "experiment/8/trial/11") == {"Determined/loss": [(5, 0.75)]}
    assert fetch(sources, logdir) == 1  # a refresh over what is there already
