"""S3 (moto's server) and GCS (emulator) backends through the Core API's checkpoint context."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.core._checkpoint import CheckpointContext
from harness.core._distributed import DistributedContext
from harness.storage import build
from tests.checkpoints.conftest import bucket_keys, uuids_in


def _context(storage: dict[str, Any]) -> CheckpointContext:
    return CheckpointContext(lambda: build(storage), DistributedContext())


def _write_tree(root: Path) -> dict[str, bytes]:
    files = {
        "model.bin": os.urandom(3 * 1024 * 1024 + 17),
        "opt/state.pt": b"optimizer",
        "deep/a/b/c.txt": b"",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def test_upload_download_roundtrip(object_storage: dict[str, Any], tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = _write_tree(src)
    ctx = _context(object_storage)
    uuid = ctx.upload(src, {"steps_completed": 7, "note": "x"})
    keys = bucket_keys(object_storage)
    assert {f"exp/{uuid}/{rel}" for rel in files} | {f"exp/{uuid}/metadata.json"} == set(keys)
    assert keys[f"exp/{uuid}/model.bin"] == len(files["model.bin"])
    dst = tmp_path / "dst"
    ctx.download(uuid, dst)
    for rel, data in files.items():
        assert (dst / rel).read_bytes() == data
    assert json.loads((dst / "metadata.json").read_text())["steps_completed"] == 7
    assert ctx.get_metadata(uuid)["note"] == "x"
    with ctx.restore_path(uuid, selector=lambda rel: rel.startswith("opt/")) as path:
        assert (path / "opt/state.pt").read_bytes() == b"optimizer"
        assert not (path / "model.bin").exists()
    storage = build(object_storage)
    assert storage.list_files(uuid)["model.bin"] == len(files["model.bin"])
    storage.delete(uuid, ["opt/*"])
    assert "opt/state.pt" not in storage.list_files(uuid)
    storage.delete(uuid)
    storage.delete(uuid)  # already gone: still fine
    assert uuid not in uuids_in(object_storage)
    assert not storage.exists(uuid)


def test_store_path_uploads_on_clean_exit_only(
    object_storage: dict[str, Any], tmp_path: Path
) -> None:
    ctx = _context(object_storage)
    with ctx.store_path({"steps_completed": 1}) as (path, uuid):
        (path / "w.bin").write_bytes(b"abc")
        assert uuid not in uuids_in(object_storage)  # nothing leaves the machine yet
    listed = build(object_storage).list_files(uuid)
    assert set(listed) == {"w.bin", "metadata.json"} and listed["w.bin"] == 3
    with pytest.raises(RuntimeError), ctx.store_path({"steps_completed": 2}) as (path, bad):
        (path / "w.bin").write_bytes(b"half")
        raise RuntimeError("crash while writing")
    assert bad not in uuids_in(object_storage)
    assert uuids_in(object_storage) == {uuid}


def test_many_small_files(object_storage: dict[str, Any], tmp_path: Path) -> None:
    src = tmp_path / "many"
    src.mkdir()
    for i in range(120):
        (src / f"f{i:03d}.bin").write_bytes(i.to_bytes(2, "big") * 100)
    storage = build(object_storage)
    storage.upload(src, "c0ffee00-0000-4000-8000-000000000000")
    listed = storage.list_files("c0ffee00-0000-4000-8000-000000000000")
    assert len(listed) == 120 and set(listed.values()) == {200}
    out = tmp_path / "out"
    storage.download("c0ffee00-0000-4000-8000-000000000000", out)
    assert (out / "f119.bin").read_bytes() == (119).to_bytes(2, "big") * 100


def test_missing_checkpoint_is_a_clear_error(
    object_storage: dict[str, Any], tmp_path: Path
) -> None:
    storage = build(object_storage)
    with pytest.raises(FileNotFoundError, match="not found"):
        storage.download("00000000-0000-4000-8000-000000000000", tmp_path)
    assert storage.read_metadata("00000000-0000-4000-8000-000000000000") is None


def test_s3_secret_not_in_repr(s3_storage: dict[str, Any]) -> None:
    storage = build(s3_storage)
    assert s3_storage["secret_key"] not in repr(storage)
    assert s3_storage["bucket"] in storage.location("00000000-0000-4000-8000-000000000000")
