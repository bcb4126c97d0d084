"""The README's one command for the main job, run for real: scripts/quickstart, then stop."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.cluster import ROOT, cluster_dir, free_port, release_cluster_dir

pytestmark = pytest.mark.integration


def test_quickstart_script_trains_digits_to_completion(tmp_path: Path) -> None:
    env = dict(os.environ)
    for key in ("DET_MASTER", "DET_USER", "DET_PASSWORD", "DET_AGENT_TOKEN", "DET_DB_URL"):
        env.pop(key, None)
    # Run as root, the quick start's agent runs the trial as another Unix user, which must
    # reach its directories: not under pytest's 0700 tmp_path (tests/cluster.py). A 0700
    # directory on the way, as root's home with pyenv in it on a fresh machine, the script opens
    # for passing through (o+x) and says so; the agent would refuse to start otherwise.
    closed = cluster_dir(tmp_path, "qs") / "closed"
    closed.mkdir(mode=0o700)
    data = closed / "qs"
    env.update(
        DET_PORT=str(free_port()),
        DET_QUICKSTART_DIR=str(data),
        DET_CONFIG_DIR=str(tmp_path / "cli"),
    )
    try:
        r = subprocess.run(
            ["bash", "scripts/quickstart"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-4000:]
        assert f"giving others search permission on {closed} " in out
        assert closed.stat().st_mode & 0o777 == 0o701
        assert "COMPLETED" in out
        assert "latest checkpoint" in out
        assert re.search(r"web page: http://\S+/experiments/\d+", out)
        assert re.search(r"^  scripts/quickstart stop +# ", out, re.M), out[-3000:]
        assert (data / "detlab.sqlite").exists(), "the embedded database was used"
        # The trial passed through this dir as another user: what is in it is not its to read.
        for f in (f for f in data.iterdir() if f.is_file()):
            assert f.stat().st_mode & 0o077 == 0, f"{f.name}: {oct(f.stat().st_mode)}"
        # progress, no password on the terminal, one agent token file (the master's)
        assert "[1/5]" in out and "[5/5]" in out
        password = (data / "admin-password").read_text().strip()
        assert password not in out and "admin-password" in out
        assert (data / "agent_token").exists()
        assert not (data / "agent-token").exists()
        assert "source .venv/bin/activate" in out
        # The next steps are copyable whole: every line is a command, its words after `#` a
        # comment; two of them run as pasted.
        steps = out.split("Next steps:", 1)[1].splitlines()[1:]
        steps = [line.strip() for line in steps if line.startswith("  ")]
        assert len(steps) >= 10, out[-3000:]
        for line in steps:
            assert " # " in line, line
            assert subprocess.run(["bash", "-n", "-c", line]).returncode == 0, line
        path_env = {**env, "PATH": f"{ROOT / '.venv' / 'bin'}:{env['PATH']}"}
        paste = "\n".join(
            line for line in steps if line.startswith(("export DET_MASTER", "det experiment list"))
        )
        pasted = subprocess.run(
            ["bash", "-c", paste], cwd=ROOT, env=path_env, capture_output=True, text=True
        )
        assert pasted.returncode == 0 and "digits" in pasted.stdout, (paste, pasted)
        status = subprocess.run(
            ["bash", "scripts/quickstart", "status"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stdout + status.stderr
        assert "master: running" in status.stdout and "agent:  running" in status.stdout
    finally:
        stop = subprocess.run(
            ["bash", "scripts/quickstart", "stop"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert not (data / "master.pid").exists()
    assert not (data / "agent.pid").exists()
    release_cluster_dir(tmp_path, "qs")
