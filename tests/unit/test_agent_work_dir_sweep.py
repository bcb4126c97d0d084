"""Work directories of allocations that died with their agent are removed when it starts again;
the agent's own directories (model-def cache, Docker state) and non-allocation names stay."""

from __future__ import annotations

import uuid
from pathlib import Path

from agent.runtime import RuntimeContext
from agent.runtime.process import ProcessRuntime, stale_allocation_dirs
from tests.unit.runtime_support import Sink


def test_only_allocation_dirs_not_running_are_stale() -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    names = [a, b, "cache", "docker", "docker-inject", "notes-" + a]
    assert stale_allocation_dirs(names, running={b}) == [a]


def _ctx(work: Path, keep: bool = False) -> RuntimeContext:
    return RuntimeContext(
        work_dir=work,
        master_url="http://master.test:8080",
        agent_id="agent-t",
        slots=[{"index": 0, "type": "cpu", "uuid": "cpu-0"}],
        log_sink=Sink(),
        kill_grace=1.0,
        keep_workdirs=keep,
    )


def test_a_restarted_agent_removes_the_work_dirs_of_dead_allocations(tmp_path: Path) -> None:
    work = tmp_path / "work"
    dead = work / str(uuid.uuid4())
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "train.py").write_text("print('hi')")
    (work / "cache" / "exp-3").mkdir(parents=True)
    (work / "docker").mkdir()
    rt = ProcessRuntime(_ctx(work))
    try:
        assert not dead.exists()
        assert (work / "cache" / "exp-3").is_dir() and (work / "docker").is_dir()
    finally:
        rt.shutdown(timeout=5)


def test_keep_workdirs_keeps_them(tmp_path: Path) -> None:
    work = tmp_path / "work"
    dead = work / str(uuid.uuid4())
    dead.mkdir(parents=True)
    rt = ProcessRuntime(_ctx(work, keep=True))
    try:
        assert dead.is_dir()
    finally:
        rt.shutdown(timeout=5)
