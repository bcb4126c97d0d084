"""A real one-node Slurm for the Slurm resource manager's tests (scripts/slurm/up).

scripts/test installs slurm-wlm and starts it; this fixture starts it too when a test runs on
its own (idempotent), and points every master the tests start at it through SLURM_CONF.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import ROOT

SLURM_ROOT = Path(os.environ.get("DET_TEST_SLURM_ROOT", "/tmp/detlab-slurm"))


@pytest.fixture(scope="session")
def slurm() -> Iterator[Path]:
    subprocess.run(["bash", str(ROOT / "scripts/slurm/up"), str(SLURM_ROOT)], check=True)
    conf = SLURM_ROOT / "etc" / "slurm.conf"
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    yield conf
    if old is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = old


@pytest.fixture(autouse=True)
def cancel_leftover_jobs(slurm: Path, tmp_path: Path, cluster_factory: object) -> Iterator[None]:
    """A test that fails midway leaves its jobs in Slurm (its master is gone, so nobody cancels
    them): they would hold the node's fake GPUs for the next test. Cancel them after each test:
    only this test's, found by their working directory (each job runs in its job directory,
    under its cluster's directory, which tmp_path links to). Another session's test run may
    share this Slurm; cancelling every detlab job would kill its trials mid-test.
    It asks for cluster_factory so that it ends before the clusters do (their links to the
    cluster directories, which it reads, are gone after)."""
    yield
    roots = [str(p.resolve()) + "/" for p in tmp_path.iterdir() if p.is_symlink()]
    if not roots:
        return
    out = subprocess.run(
        ["squeue", "--noheader", "--format=%i|%Z|%k"], capture_output=True, text=True, check=False
    ).stdout
    ids = [
        job_id
        for job_id, workdir, comment in (
            ln.split("|", 2) for ln in out.splitlines() if ln.count("|") >= 2
        )
        if comment.startswith("detlab:") and any(workdir.startswith(r) for r in roots)
    ]
    if ids:
        subprocess.run(["scancel", *ids], check=False)
