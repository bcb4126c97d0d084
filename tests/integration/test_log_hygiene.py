"""End to end: a trial that prints a NUL byte costs nobody else their logs (issue 27).

Before the fix the master failed the agent's whole batch with a 500 (PostgreSQL refuses NUL in
text), the agent retried that batch forever, and every later line of every trial on the agent
was lost. Now the master stores the line with U+FFFD in place of the NUL.
"""

from __future__ import annotations

import pytest

from tests.cluster import Cluster, wait_for
from tests.fixtures.scripted_config import make_config
from tests.integration.test_foundation import only_trial, submit

pytestmark = pytest.mark.integration


def test_a_nul_in_trial_output_blocks_no_log_line(cluster: Cluster) -> None:
    noisy = submit(
        cluster,
        make_config(cluster.ckpt_dir, batches=3, hparams={"nul_line": True, "log_lines": 2}),
    )
    d = cluster.wait_experiment(noisy, {"COMPLETED", "ERROR", "CANCELED"})
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(noisy)
    trial = only_trial(cluster, noisy)
    # The line itself arrives, repaired; the lines after it and the trial's last line too.
    lines = wait_for(
        lambda: (got := cluster.logs(trial["id"])) and "done" in got and got,
        60,
        0.2,
        what="the noisy trial's last line",
    )
    assert "a NUL\ufffdhere" in lines
    assert "log line 2 of 2" in lines
    # A later trial on the same agent still gets every line (the agent is not stuck).
    quiet = submit(cluster, make_config(cluster.ckpt_dir, batches=2, hparams={"log_lines": 3}))
    assert cluster.wait_experiment(quiet, {"COMPLETED", "ERROR"})["experiment"]["state"] == (
        "COMPLETED"
    )
    later = only_trial(cluster, quiet)
    wait_for(
        lambda: {"log line 3 of 3", "done"} <= set(cluster.logs(later["id"])),
        60,
        0.2,
        what="the later trial's lines",
    )
    assert "Traceback" not in cluster.read_log("master")
