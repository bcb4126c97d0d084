"""Real test Slurms for the Slurm resource manager's tests (scripts/slurm/up).

The one-node Slurm: scripts/test installs slurm-wlm and starts it; the `slurm` fixture starts it
too when a test runs on its own (idempotent), and points every master the tests start at it
through SLURM_CONF. The two-node Slurm (`slurm_two_nodes`, for multi-node gangs) is a second,
separate cluster under its own root and ports, started once per session on first use; a test
that uses it points its own masters at it (`on_two_nodes`).
Every test here runs on one xdist worker (tests/xdist_groups.py: group `slurm`), and `up` takes
turns on a lock in its root, so two test runs on one machine never start one Slurm twice.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import ROOT

SLURM_ROOT = Path(os.environ.get("DET_TEST_SLURM_ROOT", "/tmp/detlab-slurm"))
# slurmctld's port (slurmd +1): another port and root give a run a one-node Slurm of its own
SLURM_PORT = os.environ.get("DET_TEST_SLURM_PORT", "6817")
SLURM2_ROOT = Path(os.environ.get("DET_TEST_SLURM2_ROOT", "/tmp/detlab-slurm2n"))
SLURM2_PORT = os.environ.get("DET_TEST_SLURM2_PORT", "6827")  # slurmctld; the nodes +1, +2


@pytest.fixture(scope="session")
def slurm() -> Iterator[Path]:
    subprocess.run(
        ["bash", str(ROOT / "scripts/slurm/up"), str(SLURM_ROOT), "--port", SLURM_PORT],
        check=True,
    )
    conf = SLURM_ROOT / "etc" / "slurm.conf"
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    yield conf
    if old is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = old


@pytest.fixture(scope="session")
def slurm_two_nodes() -> Path:
    """A second test Slurm: nodes n1 and n2 on this host, one fake GPU each, partitions `low`
    and `high` over both. Its slurm.conf; nothing of the one-node Slurm is touched."""
    subprocess.run(
        [
            "bash",
            str(ROOT / "scripts/slurm/up"),
            str(SLURM2_ROOT),
            "--nodes",
            "2",
            "--port",
            SLURM2_PORT,
        ],
        check=True,
    )
    return SLURM2_ROOT / "etc" / "slurm.conf"


@pytest.fixture
def on_two_nodes(
    slurm_two_nodes: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cluster_factory: object
) -> Iterator[Path]:
    """This test's masters (and its Slurm commands) use the two-node Slurm; its jobs left
    there are cancelled after it, as `cancel_leftover_jobs` does on the one-node Slurm."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_two_nodes))
    yield slurm_two_nodes
    _cancel_jobs_under(tmp_path, {**os.environ, "SLURM_CONF": str(slurm_two_nodes)})


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
    _cancel_jobs_under(tmp_path, dict(os.environ))


def _cancel_jobs_under(tmp_path: Path, env: dict[str, str]) -> None:
    """Cancel the detlab jobs (of the Slurm `env` names) that run under this test's clusters."""
    roots = [str(p.resolve()) + "/" for p in tmp_path.iterdir() if p.is_symlink()]
    if not roots:
        return
    out = subprocess.run(
        ["squeue", "--noheader", "--format=%i|%Z|%k"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    ).stdout
    ids = [
        job_id
        for job_id, workdir, comment in (
            ln.split("|", 2) for ln in out.splitlines() if ln.count("|") >= 2
        )
        if comment.startswith("detlab:") and any(workdir.startswith(r) for r in roots)
    ]
    if ids:
        subprocess.run(["scancel", *ids], check=False, env=env)
