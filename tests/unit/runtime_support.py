"""Helpers shared by the process-runtime tests: a log sink, model tarballs, specs, waiting."""

from __future__ import annotations

import io
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from agent.runtime.process import ProcessRuntime
from detlab.protocol import ReportedState, StartSpec

REPO = Path(__file__).resolve().parents[2]


class Sink:
    """Collects log lines as the runtime emits them."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str]] = []
        self._cond = threading.Condition()

    def __call__(self, aid: str, stream: str, line: str) -> None:
        with self._cond:
            self.lines.append((aid, stream, line))
            self._cond.notify_all()

    def of(self, aid: str, stream: str | None = None) -> list[str]:
        with self._cond:
            return [ln for a, s, ln in self.lines if a == aid and (stream is None or s == stream)]

    def wait_for(self, aid: str, text: str, timeout: float = 60.0) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: any(text in ln for ln in self.of(aid)), timeout)
        assert ok, f"{text!r} never appeared in {self.of(aid)}"


def make_tarball(path: Path, files: dict[str, str | bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def spec(aid: str, entrypoint: Any, **extra: Any) -> StartSpec:
    """A start spec as the agent receives it (parsed from the master's JSON)."""
    return StartSpec.parse(
        {
            "allocation_id": aid,
            "trial_id": 7,
            "experiment_id": 3,
            "entrypoint": entrypoint,
            "slot_indexes": [0],
            "env": {"DET_TRIAL_ID": "7", "DET_EXPERIMENT_ID": "3", "DET_ALLOCATION_ID": aid},
            **extra,
        }
    )


def state(rt: ProcessRuntime, aid: str) -> dict[str, Any]:
    """The allocation's report in the poll's JSON form."""
    return next(a for a in rt.states() if a.id == aid).to_json()


def wait_exited(rt: ProcessRuntime, aid: str, timeout: float = 60.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = state(rt, aid)
        if st["state"] == ReportedState.EXITED:
            return st
        time.sleep(0.02)
    raise AssertionError(f"{aid} did not exit: {state(rt, aid)}")


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status
