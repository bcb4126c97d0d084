"""A command's `--context` on the docker runtime (issue 38): the launcher (harness/task_context.py,
injected with the harness) fetches and unpacks it inside the container, as the task's own
identity, before the command runs in the container's working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster import Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.timeout(600),
]


def test_a_command_in_a_container_sees_its_context(
    dcluster: Cluster, default_image: str, tmp_path: Path
) -> None:
    ctx = tmp_path / "ctx"
    (ctx / "pkg").mkdir(parents=True)
    (ctx / "pkg" / "data.txt").write_text("forty-two")
    (ctx / "skip.bin").write_bytes(b"\0" * 1024)
    (ctx / ".detignore").write_text("*.bin\n")
    run = dcluster.det(
        "cmd",
        "run",
        "-c",
        str(ctx),
        "--",
        "sh",
        "-c",
        'echo "in $(pwd): $(cat pkg/data.txt)"; ls; test ! -e skip.bin && echo no-skip',
    )
    assert "in /run/determined/workdir: forty-two" in run.stdout, run.stdout
    assert "no-skip" in run.stdout, run.stdout
