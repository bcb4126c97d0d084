"""Smoke test: det-tui in a real terminal (tmux) against a real master; keys in, screen out."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid

import pytest

from tests.cluster import Cluster, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def tmux(*args: str) -> str:
    return subprocess.run(
        ["tmux", *args], capture_output=True, text=True, check=True, timeout=10
    ).stdout


def test_det_tui_in_tmux(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.fixtures.scripted_config import make_config
    from tests.tui.test_live import client, model_tar

    exp = client(cluster).create_experiment(
        make_config(cluster.ckpt_dir, batches=5, name="smoke-exp", hparams={"log_lines": 3}),
        model_tar(),
    )
    session = f"dettui-{uuid.uuid4().hex[:8]}"
    env = cluster.env()
    exports = " ".join(f"{k}={env[k]}" for k in ("DET_USER", "DET_PASSWORD", "DET_CONFIG_DIR"))
    cmd = f"env {exports} {sys.executable} -m tui -m {cluster.url} exps"
    tmux("new-session", "-d", "-s", session, "-x", "140", "-y", "35", cmd)
    subprocess.run(["tmux", "resize-window", "-t", session, "-x", "140", "-y", "35"])

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", session)

    def command(text: str) -> None:
        tmux("send-keys", "-t", session, ":")
        time.sleep(0.5)  # keys typed before the prompt opens go to the view underneath
        tmux("send-keys", "-t", session, text, "Enter")

    def shows(text: str, timeout: float = 30) -> str:
        try:
            return wait_for(lambda: text in (s := screen()) and s, timeout, 0.2, what=repr(text))
        except TimeoutError:
            raise AssertionError(f"{text!r} not on the screen:\n{screen()}") from None

    try:
        shows("smoke-exp")
        out = shows("agents 1/1")
        assert "detlab" in out and "slots 0/1" in out and "queued 0" in out
        command("gpu")
        out = shows("agent-1")
        assert "GPUs and slots" in out
        command(f"exp {exp['id']}")
        shows(f"Experiment {exp['id']}")
        tmux("send-keys", "-t", session, "?")
        shows("everywhere")
        tmux("send-keys", "-t", session, "Escape")
        time.sleep(0.3)
        command("queue")
        shows("pools:")
        tmux("send-keys", "-t", session, "q")
        wait_for(
            lambda: session not in tmux("ls", "-F", "#{session_name}") if _alive() else True,
            15,
            0.2,
            what="det-tui to quit",
        )
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def _alive() -> bool:
    return subprocess.run(["tmux", "ls"], capture_output=True).returncode == 0
