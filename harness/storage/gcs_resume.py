"""GCS uploads of large files that survive a kill: a resumable upload session per file.

The session URL (GCS's `uploadType=resumable`) is journaled before the first byte; the file
goes up in 16 MiB chunks (`Content-Range: bytes START-END/TOTAL`, 308 until the last). A
restarted upload asks the session how much it holds (`Content-Range: bytes */TOTAL`: 308 with a
`Range` header, or 200/201 when it was already complete) and sends the rest; an expired session
(404/410, after about a week) starts a new one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.storage.journal import Journal

RESUMABLE_THRESHOLD = 16 * 1024 * 1024
CHUNK = 16 * 1024 * 1024  # a multiple of 256 KiB, as GCS requires for all but the last chunk

_RANGE = re.compile(r"bytes=0-(\d+)")


def _held(reply: Any) -> int:
    """Bytes a 308 reply says the session holds."""
    m = _RANGE.match(reply.headers.get("Range", "") or "")
    return int(m.group(1)) + 1 if m else 0


def session_offset(http: Any, url: str, size: int) -> int | None:
    """How many bytes the session holds (`size` when complete); None when it is gone."""
    reply = http.put(url, data=b"", headers={"Content-Range": f"bytes */{size}"})
    if reply.status_code in (200, 201):
        return size
    if reply.status_code == 308:
        return _held(reply)
    if reply.status_code in (404, 410):
        return None
    raise OSError(f"resumable upload status: HTTP {reply.status_code} {reply.text[:200]}")


def upload_resumable(bucket: Any, http: Any, path: Path, key: str, journal: Journal) -> None:
    st = path.stat()
    size = st.st_size
    identity = {"key": key, "size": size, "mtime_ns": st.st_mtime_ns}
    url: str | None = None
    offset = 0
    for r in reversed(journal.records("session")):
        if all(r.get(k) == v for k, v in identity.items()):
            held = session_offset(http, str(r["url"]), size)
            if held is not None:
                url, offset = str(r["url"]), held
            break
    if url is None:
        url = bucket.blob(key).create_resumable_upload_session(size=size)
        journal.add({"kind": "session", **identity, "url": url})
    with open(path, "rb") as f:
        while offset < size:
            f.seek(offset)
            data = f.read(CHUNK)
            end = offset + len(data) - 1
            reply = http.put(
                url, data=data, headers={"Content-Range": f"bytes {offset}-{end}/{size}"}
            )
            if reply.status_code in (200, 201):
                offset = size
            elif reply.status_code == 308:
                held = _held(reply)
                if held <= offset:
                    raise OSError(f"uploading {key}: the session took none of bytes {offset}-{end}")
                offset = held
            else:
                raise OSError(
                    f"uploading {key} bytes {offset}-{end}: HTTP {reply.status_code} "
                    f"{reply.text[:200]}"
                )
    journal.add({"kind": "file", **identity})
