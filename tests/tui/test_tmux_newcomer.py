"""A newcomer's first session, typed into a real terminal (tmux) on a machine whose every core is
busy: submit with `det`, watch it in det-tui, `:exp N`, follow the trial's logs, kill it, quit.

Every step waits for the screen (no fixed sleeps); the CPU load is one busy process per core for
the whole test, as on a shared lab machine where someone else is training.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.cluster import BIN, Cluster, wait_for
from tests.fixtures.scripted_config import SCRIPTED_DIR, make_config
from tests.tui.tmux import Terminal, require_tmux

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.tmux]


@pytest.fixture
def busy_cores() -> Iterator[int]:
    n = os.cpu_count() or 1
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield n
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


@pytest.mark.timeout(600)
def test_a_newcomer_session_under_cpu_load(  # type: ignore[no-untyped-def]
    cluster: Cluster, tmp_path, busy_cores: int
) -> None:
    require_tmux()
    config = tmp_path / "first.yaml"
    # Long enough never to finish by itself: the newcomer kills it. A line every 5 steps.
    config.write_text(
        make_config(
            cluster.ckpt_dir,
            batches=100_000,
            name="my-first-exp",
            hparams={"sleep": 0.2, "checkpoint_every": 5, "log_lines": 2},
        )
    )
    env = cluster.env()
    exports = " ".join(
        f"{k}={shlex.quote(env[k])}"
        for k in ("DET_MASTER", "DET_USER", "DET_PASSWORD", "DET_CONFIG_DIR")
    )
    path = shlex.quote(f"{BIN}:{os.environ.get('PATH', '')}")
    term = Terminal(f"env {exports} PATH={path} PS1='newcomer$ ' bash --norc --noprofile")
    try:
        term.shows("newcomer$")
        term.type(f"det experiment create {config} {SCRIPTED_DIR}")
        term.keys("Enter")
        out = term.shows("Created experiment", 120)
        exp_id = int(out.split("Created experiment ")[1].split()[0])

        term.type("det-tui")
        term.keys("Enter")
        term.shows("my-first-exp", 120)
        term.shows("agents 1/1")
        term.command(f"exp {exp_id}")
        term.shows(f"Experiment {exp_id}")
        term.prompt_closed()
        # the trial runs: its row says so once the agent has started it
        term.shows("RUNNING", 180)

        term.keys("l")  # the logs of the trial under the cursor
        term.shows("log line 2 of 2", 120)
        first = term.shows("at step 5", 120)
        assert "at step 30" not in first
        # followed without a key: later lines arrive on their own
        term.shows("at step 30", 180)

        term.keys("Escape")
        term.shows(f"Experiment {exp_id}")
        term.keys("x")
        term.shows("Kill experiment")
        term.keys("y")
        wait_for(
            lambda: cluster.experiment(exp_id)["experiment"]["state"] == "CANCELED",
            120,
            what="the experiment to be CANCELED",
        )
        term.shows("CANCELED", 60)

        term.keys("q")
        term.shows("newcomer$")  # det-tui quit back to the shell, not crashed
        assert "Traceback" not in term.screen()
        term.type("exit")
        term.keys("Enter")
        assert term.exits() == "0", term.screen()
    finally:
        term.close()
