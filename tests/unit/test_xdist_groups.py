"""tests/xdist_groups.py: which tests share an xdist worker, each worker's ports, and a real
`pytest -n 3 --dist loadgroup` run that keeps each group on one worker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import xdist_groups as xg

ROOT = Path(__file__).resolve().parents[2]


def test_a_path_rule_names_the_group_and_wins_over_a_marker() -> None:
    assert xg.group_for("tests/slurm/test_slurm_e2e.py::test_x", set()) == "slurm"
    assert xg.group_for("tests/slurm/test_slurm_e2e.py::test_x", {"docker"}) == "slurm"
    assert xg.group_for("tests/integration/test_request_memory.py::test_y[a]", set()) == "solo"


def test_markers_name_their_group_and_other_tests_have_none() -> None:
    assert xg.group_for("tests/docker/test_docker_runtime.py::t", {"docker", "slow"}) == "docker"
    assert xg.group_for("tests/tui/test_tmux_newcomer.py::t", {"tmux", "integration"}) == "tmux"
    assert xg.group_for("tests/api/test_jobs_api.py::t", {"integration"}) is None
    # A unit test of the Slurm CLI's parsing is not in tests/slurm/: it runs anywhere.
    assert xg.group_for("tests/unit/test_slurm_cli.py::t", set()) is None


def test_the_worker_index_comes_from_xdist_and_is_none_outside_it() -> None:
    assert xg.worker_index({"PYTEST_XDIST_WORKER": "gw3"}) == 3
    assert xg.worker_index({}) is None
    assert xg.worker_index({"PYTEST_XDIST_WORKER": "master"}) is None


def test_workers_have_disjoint_port_ranges_below_the_ephemeral_range() -> None:
    ranges = [set(xg.port_range(i)) for i in range(xg.MAX_WORKERS)]
    assert all(a.isdisjoint(b) for i, a in enumerate(ranges) for b in ranges[i + 1 :])
    assert max(xg.port_range(xg.MAX_WORKERS - 1)) < 32768
    with pytest.raises(ValueError, match="at most 12 workers"):
        xg.port_range(xg.MAX_WORKERS)


def test_a_worker_port_is_free_and_a_port_in_use_is_passed_over() -> None:
    index = xg.MAX_WORKERS - 1
    first = xg.worker_port(index)
    with socket.socket() as held:
        held.bind(("127.0.0.1", first + 1))
        second = xg.worker_port(index)
    assert first in xg.port_range(index) and second in xg.port_range(index)
    assert second not in (first, first + 1)


GROUPED = """
import os
from pathlib import Path

import pytest


def record(name):
    with open(os.environ["XG_OUT"], "a") as f:
        f.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.mark.parametrize("i", range(6))
def test_free(i):
    record(f"free{i}")


@pytest.mark.docker
@pytest.mark.parametrize("i", range(6))
def test_docker(i):
    record(f"docker{i}")
"""


def test_a_loadgroup_run_keeps_each_group_on_one_worker(tmp_path: Path) -> None:
    # The repository's own collection hook, on files laid out as in tests/.
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    docker: d\n")
    slurm = tmp_path / "tests" / "slurm"
    slurm.mkdir(parents=True)
    # In tests/slurm/ every test is in the slurm group, the docker-marked ones too.
    in_slurm = GROUPED.replace('f"free', 'f"slurm').replace('f"docker', 'f"slurm-docker')
    (slurm / "test_s.py").write_text(in_slurm)
    (tmp_path / "tests" / "test_g.py").write_text(GROUPED)
    out = tmp_path / "ran.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XG_OUT": str(out)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
         "-n", "3", "--dist", "loadgroup", "tests"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = dict(line.split() for line in out.read_text().splitlines())
    assert len(ran) == 4 * 6
    workers = {g: {w for n, w in ran.items() if n.startswith(g)} for g in ("slurm", "docker")}
    assert len(workers["slurm"]) == 1 and len(workers["docker"]) == 1, ran
