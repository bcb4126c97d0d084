"""Fixtures for the process-runtime tests (test_agent_runtime, test_agent_warm_start)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.runtime import RuntimeContext
from agent.runtime.process import ProcessRuntime
from tests.unit.runtime_support import Sink


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
def runtime(tmp_path: Path, sink: Sink) -> Iterator[ProcessRuntime]:
    ctx = RuntimeContext(
        work_dir=tmp_path / "work",
        master_url="http://master.test:8080",
        agent_id="agent-t",
        slots=[{"index": i, "type": "cpu", "uuid": f"cpu-{i}"} for i in range(2)],
        log_sink=sink,
        kill_grace=1.0,
    )
    rt = ProcessRuntime(ctx)
    yield rt
    rt.shutdown(timeout=5)
