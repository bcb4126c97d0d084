"""A test run cannot pass by skipping (tests/skipguard.py): the verdict, and real pytest runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.skipguard import Skip, verdict

ROOT = Path(__file__).resolve().parents[2]


def skip(nodeid: str, *groups: str, reason: str = "why") -> Skip:
    return Skip(nodeid, frozenset(groups), reason)


def test_no_skips_pass_silently() -> None:
    v = verdict([], env={})
    assert not v.failed and v.lines == []


def test_any_skip_fails_and_names_the_test_and_reason() -> None:
    v = verdict([skip("t.py::a", reason="optuna is not installed")], env={})
    assert v.failed
    assert "1 test(s) were skipped" in v.lines[0]
    assert "t.py::a: optuna is not installed" in v.lines[1]


def test_a_docker_skip_fails_without_the_opt_out_and_says_how_to_opt_out() -> None:
    v = verdict([skip("d.py::a", "docker", reason="engine does not answer")], env={})
    assert v.failed
    assert any("DET_SKIP_DOCKER_SETUP=1" in line for line in v.lines)


def test_opting_out_passes_and_the_summary_repeats_the_variable() -> None:
    env = {"DET_SKIP_DOCKER_SETUP": "1", "DET_SKIP_TMUX_TESTS": "1"}
    v = verdict([skip("d.py::a", "docker"), skip("d.py::b", "docker"), skip("t::c", "tmux")], env)
    assert not v.failed
    assert v.lines == [
        "OPTED OUT: 2 Docker runtime test(s) did not run because DET_SKIP_DOCKER_SETUP=1 is set",
        "OPTED OUT: 1 tmux (det-tui in a real terminal) test(s) did not run because "
        "DET_SKIP_TMUX_TESTS=1 is set",
    ]


def test_an_opt_out_covers_only_its_own_group() -> None:
    v = verdict([skip("t::c", "tmux"), skip("u::d")], env={"DET_SKIP_DOCKER_SETUP": "1"})
    assert v.failed and len([ln for ln in v.lines if ln.startswith("  ")]) == 3  # 2 + hint


# Each real run both in one process and on two pytest-xdist workers (the controller, which
# collects nothing itself, must judge the workers' skips the same way).
PROCESSES = pytest.mark.parametrize("procs", [(), ("-n", "2")], ids=["serial", "xdist"])


def run_pytest(
    tmp_path: Path, source: str, procs: tuple[str, ...] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(source)
    full = {k: v for k, v in os.environ.items() if not k.startswith("DET_SKIP_")}
    full.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.skipguard", "-p", "no:cacheprovider",
         "-q", *procs, str(tmp_path / "test_sample.py")],
        cwd=tmp_path, env=full, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


SAMPLE = """
import pytest

def test_runs():
    assert 1 + 1 == 2

@pytest.mark.docker
def test_needs_docker():
    pytest.skip("the Docker engine does not answer")
"""


@PROCESSES
def test_a_real_run_with_a_skip_exits_1_and_says_why(
    tmp_path: Path, procs: tuple[str, ...]
) -> None:
    r = run_pytest(tmp_path, SAMPLE, procs)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 passed, 1 skipped" in r.stdout
    assert "FAILED: 1 test(s) were skipped" in r.stdout
    assert "test_needs_docker: the Docker engine does not answer" in r.stdout


@PROCESSES
def test_a_real_run_opted_out_exits_0_and_repeats_the_variable(
    tmp_path: Path, procs: tuple[str, ...]
) -> None:
    r = run_pytest(tmp_path, SAMPLE, procs, DET_SKIP_DOCKER_SETUP="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "because DET_SKIP_DOCKER_SETUP=1 is set" in r.stdout


@PROCESSES
def test_a_real_run_without_skips_exits_0(tmp_path: Path, procs: tuple[str, ...]) -> None:
    r = run_pytest(tmp_path, "def test_ok():\n    assert True is not False\n", procs)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped" not in r.stdout


@PROCESSES
def test_a_real_run_that_collects_nothing_exits_5(tmp_path: Path, procs: tuple[str, ...]) -> None:
    r = run_pytest(tmp_path, "def helper():\n    pass\n", procs)
    assert r.returncode == 5, r.stdout + r.stderr  # scripts/test counts 5 as a failure
