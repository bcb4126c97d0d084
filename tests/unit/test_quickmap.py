"""scripts/test-quick's map from changed files to the tests that cover them (tests/quickmap.py)."""

from __future__ import annotations

import subprocess

import pytest

from tests.quickmap import MAP, ROOT, Unmapped, expand, globs_for, plan


def test_the_longest_prefix_wins() -> None:
    assert globs_for("master/scheduler/fit.py") == ("tests/unit/test_scheduler*.py",)
    assert globs_for("master/scheduler") == ("tests/unit/test_scheduler*.py",)
    assert globs_for("master/services/transitions.py") == ("tests/api",)
    assert globs_for("harness/cli/_follow.py") == ("tests/unit/test_cli*.py",)
    assert globs_for("harness/core/_context.py") == ("tests/unit/test_harness*.py",)


def test_tests_run_themselves_and_helpers_their_folder() -> None:
    assert globs_for("tests/tui/test_views.py") == ("tests/tui/test_views.py",)
    assert globs_for("./tests/tui/") == ("tests/tui",)
    assert globs_for("tests/tui/helpers.py") == ("tests/tui",)
    assert globs_for("tests/conftest.py") == ("tests/unit",)


def test_docs_are_passed_over_and_an_unknown_file_is_named() -> None:
    assert plan(["docs/testing.md", "tui/app.py", "tui/screens/queue.py"]) == ["tests/tui"]
    assert plan(["setup.cfg", "detlab/protocol.py"]) == ["tests/unit/test_protocol.py"]
    with pytest.raises(Unmapped, match="scripts/install"):
        plan(["tui/app.py", "scripts/install"])


def test_every_entry_points_at_tests_that_exist() -> None:
    for prefix, globs in MAP:
        assert (ROOT / prefix.rstrip("/")).exists(), prefix
        for g in globs:
            assert expand([g]), f"{prefix}: {g} matches no test"


def test_the_command_prints_paths_pytest_can_run() -> None:
    out = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-m", "tests.quickmap", "master/searcher", "tui"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert "tests/unit/test_searcher_asha.py" in out and "tests/tui" in out
    assert all((ROOT / p).exists() for p in out)


def test_a_file_inside_a_planned_folder_is_left_to_the_folder() -> None:
    # pytest given `tests/unit/test_wait_for.py tests/unit` collected only the file's 3 tests.
    got = plan(["tests/cluster.py", "tests/conftest.py"])
    assert got == ["tests/unit"]
