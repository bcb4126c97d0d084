"""Transfers that resume after the process doing them is killed (SIGKILL, a real process):
S3 on moto's server (multipart uploads continue from their parts, large downloads from their
chunks, finished files are skipped), GCS on the emulator (finished files are skipped)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.storage import build
from harness.storage.journal import Journal, journal_path
from tests.checkpoints.conftest import bucket_keys
from tests.checkpoints.servers import s3_client

MiB = 1024 * 1024
PARTS = 6  # big.bin: 6 x 16 MiB parts/chunks (the S3 backend's part size)
SMALL = 20

RUN = """
import json, os, sys, time
from harness.storage import build
backend = build(json.loads(sys.argv[1]))
# One in flight (not 16): the test must catch the transfer half-way to kill it.
backend.concurrency = 1
if hasattr(backend, "transfer_config"):
    backend.transfer_config.max_concurrency = 1
if os.environ.get("STALL_AFTER_FIRST_PART"):
    # The test kills this process once a part is stored; on a loaded machine its polls are slower
    # than a local server takes the remaining parts, so the upload stops here until killed.
    from harness.storage import s3_resume

    put = s3_resume._Multipart._put

    def stall(self, n):
        fields = put(self, n)
        time.sleep(600)
        return fields

    s3_resume._Multipart._put = stall
getattr(backend, sys.argv[2])(*sys.argv[3:])
"""


def _tree(root: Path) -> dict[str, str]:
    root.mkdir()
    with open(root / "big.bin", "wb") as f:
        for _ in range(PARTS * 16):
            f.write(os.urandom(MiB))
    for i in range(SMALL):
        (root / f"small{i:02d}.bin").write_bytes(os.urandom(64 * 1024))
    return _digests(root)


def _digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _kill_when(
    args: list[str], storage: dict[str, Any], cond: Callable[[], bool], **env_extra: str
) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), **env_extra)
    proc = subprocess.Popen([sys.executable, "-c", RUN, json.dumps(storage), *args], env=env)
    try:
        deadline = time.monotonic() + 120
        while not cond():
            assert proc.poll() is None, "the transfer ended before it could be killed"
            assert time.monotonic() < deadline, "the transfer never got far enough"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def _count_calls(backend: Any, operation: str) -> list[dict]:
    calls: list[dict] = []
    backend.client.meta.events.register(
        f"before-parameter-build.s3.{operation}", lambda params, **kw: calls.append(dict(params))
    )
    return calls


def _parts_stored(storage: dict[str, Any]) -> int:
    c = s3_client(storage["endpoint_url"])
    ups = c.list_multipart_uploads(Bucket=storage["bucket"]).get("Uploads", [])
    if not ups:
        return 0
    up = ups[0]
    parts = c.list_parts(Bucket=storage["bucket"], Key=up["Key"], UploadId=up["UploadId"])
    return len(parts.get("Parts", []))


def test_s3_upload_resumes_from_its_parts(s3_storage: dict[str, Any], tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    _tree(src)
    uuid = str(uuidlib.uuid4())
    _kill_when(
        ["upload", str(src), uuid],
        s3_storage,
        lambda: _parts_stored(s3_storage) >= 1,
        STALL_AFTER_FIRST_PART="1",
    )
    parts_at_kill = _parts_stored(s3_storage)
    assert parts_at_kill < PARTS
    assert not any(k.endswith("/big.bin") for k in bucket_keys(s3_storage))
    jpath = journal_path(src, uuid, "upload")
    journaled = set(Journal(jpath).finished())
    # A journaled small file changed since (same size, new content and mtime) goes up again.
    changed = next((k.rsplit("/", 1)[1] for k in sorted(journaled)), None)
    if changed:
        (src / changed).write_bytes(os.urandom(64 * 1024))
    want = _digests(src)

    backend = build(s3_storage)
    parts, puts = _count_calls(backend, "UploadPart"), _count_calls(backend, "PutObject")
    backend.upload(src, uuid)
    assert 1 <= len(parts) <= PARTS - parts_at_kill, (len(parts), parts_at_kill)
    assert len(puts) <= SMALL - len(journaled) + (1 if changed else 0)
    print(f"resumed upload: {len(parts)} of {PARTS} parts, {len(puts)} of {SMALL} small files")
    assert not jpath.exists()  # finished: nothing left to resume
    out = tmp_path / "out"
    backend.download(uuid, out)
    assert _digests(out) == want


def test_s3_download_resumes_from_its_chunks(s3_storage: dict[str, Any], tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    want = _tree(src)
    uuid = str(uuidlib.uuid4())
    build(s3_storage).upload(src, uuid)
    dst = tmp_path / "dst"
    jpath = journal_path(dst, uuid, "download")

    def chunks() -> int:
        return len(Journal(jpath).records("chunk")) if jpath.exists() else 0

    _kill_when(["download", uuid, str(dst)], s3_storage, lambda: chunks() >= 1)
    at_kill = chunks()
    assert at_kill < PARTS and not (dst / "big.bin").exists()
    assert (dst / "big.bin.det-part").exists()

    backend = build(s3_storage)
    gets = _count_calls(backend, "GetObject")
    backend.download(uuid, dst)
    ranged = [g for g in gets if g.get("Range") and g.get("IfMatch")]
    assert 1 <= len(ranged) <= PARTS - at_kill, (len(ranged), at_kill)
    print(f"resumed download: {len(ranged)} of {PARTS} chunks fetched again")
    assert _digests(dst) == want
    assert not jpath.exists() and not (dst / "big.bin.det-part").exists()


def test_s3_download_removes_the_temp_files_a_killed_download_left(
    s3_storage: dict[str, Any], tmp_path: Path
) -> None:
    # A download killed while boto3's transfer manager wrote `small07.bin.D22EbEa9` (its temp
    # name) left that file behind; the next download of small07.bin removes it, and spares a
    # file that only looks alike.
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "small07.bin").write_bytes(os.urandom(1024))
    (src / "small07.bin.0123abcd").write_bytes(b"a file of the checkpoint itself")
    want = _digests(src)
    uuid = str(uuidlib.uuid4())
    build(s3_storage).upload(src, uuid)
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "small07.bin.D22EbEa9").write_bytes(b"half a file")
    (dst / "small07.bin.notes").write_bytes(b"the user's own")
    build(s3_storage).download(uuid, dst)
    own = hashlib.sha256(b"the user's own").hexdigest()
    assert _digests(dst) == {**want, "small07.bin.notes": own}


def test_gcs_transfers_skip_finished_files(gcs_storage: dict[str, Any], tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    src.mkdir()
    for i in range(60):
        (src / f"f{i:02d}.bin").write_bytes(os.urandom(256 * 1024))
    want = _digests(src)
    uuid = str(uuidlib.uuid4())
    jpath = journal_path(src, uuid, "upload")

    def some_done() -> bool:
        return jpath.exists() and len(Journal(jpath).finished()) >= 5

    _kill_when(["upload", str(src), uuid], gcs_storage, some_done)
    backend = build(gcs_storage)
    done = Journal(jpath).finished()
    assert 5 <= len(done) < 60

    def generations() -> dict[str, int]:
        return {b.name: b.generation for b in backend.client.list_blobs(gcs_storage["bucket"])}

    before = generations()
    backend.upload(src, uuid)
    after = generations()
    assert all(after[k] == before[k] for k in done)  # not sent again
    assert len(after) == 60 and not jpath.exists()
    out = tmp_path / "out"
    backend.download(uuid, out)
    assert _digests(out) == want


def test_journal_ignores_a_torn_line_and_goes_when_finished(tmp_path: Path) -> None:
    path = journal_path(tmp_path / "ckpt", "u1", "upload")
    assert path == tmp_path / ".ckpt.u1.det-upload"  # beside the directory, not in it
    j = Journal(path)
    j.add({"kind": "file", "key": "a", "size": 1})
    j.add({"kind": "multipart", "key": "b", "upload_id": "x"})
    j.close()
    with open(path, "a") as f:
        f.write('{"kind": "file", "key": "c", "si')  # a kill mid-write
    again = Journal(path)
    assert set(again.finished()) == {"a"}
    assert again.records("multipart")[0]["upload_id"] == "x"
    again.finish()
    assert not path.exists()


def test_gcs_large_upload_continues_its_session(
    gcs_storage: dict[str, Any], tmp_path: Path
) -> None:
    from harness.storage.gcs_resume import CHUNK, session_offset

    src = tmp_path / "ckpt"
    src.mkdir()
    with open(src / "big.bin", "wb") as f:
        for _ in range(4 * CHUNK // MiB):
            f.write(os.urandom(MiB))
    want = _digests(src)
    uuid = str(uuidlib.uuid4())
    jpath = journal_path(src, uuid, "upload")
    backend = build(gcs_storage)
    http = backend.client._http  # type: ignore[attr-defined]

    def held() -> int:
        sessions = Journal(jpath).records("session") if jpath.exists() else []
        if not sessions:
            return 0
        return session_offset(http, sessions[0]["url"], 4 * CHUNK) or 0

    _kill_when(["upload", str(src), uuid], gcs_storage, lambda: held() >= CHUNK)
    at_kill = held()
    assert CHUNK <= at_kill < 4 * CHUNK
    ranges: list[str] = []
    put = http.put

    def counting_put(*args: Any, **kwargs: Any) -> Any:
        ranges.append((kwargs.get("headers") or {}).get("Content-Range", ""))
        return put(*args, **kwargs)

    http.put = counting_put
    backend.upload(src, uuid)
    sent = [r for r in ranges if not r.startswith("bytes */")]
    assert sent and all(not r.startswith("bytes 0-") for r in sent), ranges
    print(f"resumed GCS session at byte {at_kill:,}: {len(sent)} of 4 chunks sent again")
    assert not jpath.exists()
    out = tmp_path / "out"
    backend.download(uuid, out)
    assert _digests(out) == want


def test_gcs_large_download_resumes_from_its_chunks(
    gcs_storage: dict[str, Any], tmp_path: Path, monkeypatch: Any
) -> None:
    from harness.storage.gcs_resume import CHUNK
    from harness.storage.ranged import RangedDownload

    src = tmp_path / "ckpt"
    src.mkdir()
    with open(src / "big.bin", "wb") as f:
        for _ in range(4 * CHUNK // MiB):
            f.write(os.urandom(MiB))
    want = _digests(src)
    uuid = str(uuidlib.uuid4())
    build(gcs_storage).upload(src, uuid)
    dst = tmp_path / "dst"
    jpath = journal_path(dst, uuid, "download")

    def chunks() -> int:
        return len(Journal(jpath).records("chunk")) if jpath.exists() else 0

    _kill_when(["download", uuid, str(dst)], gcs_storage, lambda: chunks() >= 1)
    at_kill = chunks()
    assert at_kill < 4 and (dst / "big.bin.det-part").exists()
    fetched: list[int] = []
    real = RangedDownload._get

    def counting(self: RangedDownload, i: int) -> None:
        fetched.append(i)
        real(self, i)

    monkeypatch.setattr(RangedDownload, "_get", counting)
    build(gcs_storage).download(uuid, dst)
    assert 1 <= len(fetched) <= 4 - at_kill, (fetched, at_kill)
    assert _digests(dst) == want and not jpath.exists()
