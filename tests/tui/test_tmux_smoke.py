"""Smoke test: det-tui in a real terminal (tmux) against a real master; keys in, screen out.

Every step waits for the screen to show what it expects (no fixed sleeps), so it passes on a
loaded machine. tmux missing fails the test; DET_SKIP_TMUX_TESTS=1 leaves it out on purpose.
"""

from __future__ import annotations

import sys

import pytest

from tests.cluster import Cluster
from tests.tui.tmux import Terminal, require_tmux

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.tmux]


def test_det_tui_in_tmux(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    require_tmux()
    from tests.fixtures.scripted_config import make_config
    from tests.tui.test_live import client, model_tar

    exp = client(cluster).create_experiment(
        make_config(cluster.ckpt_dir, batches=5, name="smoke-exp", hparams={"log_lines": 3}),
        model_tar(),
    )
    env = cluster.env()
    exports = " ".join(f"{k}={env[k]}" for k in ("DET_USER", "DET_PASSWORD", "DET_CONFIG_DIR"))
    term = Terminal(f"env {exports} {sys.executable} -m tui -m {cluster.url} exps")
    try:
        term.shows("smoke-exp")
        term.shows("agents 1/1")
        term.shows("slots 0/1", 180)  # the 5-batch experiment has finished and freed its slot
        out = term.shows("queued 0")
        assert "detlab" in out
        term.command("gpu")
        out = term.shows("agent-1")
        assert "GPUs and slots" in out
        term.command(f"exp {exp['id']}")
        term.shows(f"Experiment {exp['id']}")
        term.prompt_closed()
        term.keys("?")
        term.shows("everywhere")
        term.keys("Escape")
        term.gone("everywhere")
        term.command("queue")
        term.shows("pools:")
        term.type("3")  # the experiments list (a view key)
        term.shows("PROGRESS")
        term.keys("q")
        assert term.exits() == "0", term.screen()
    finally:
        term.close()
