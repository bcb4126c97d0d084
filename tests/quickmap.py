"""scripts/test-quick's map from the files you changed to the tests that cover them.

`python -m tests.quickmap [PATH ...]` prints the test paths, one per line, for the source paths
given (files or folders), or, with none, for the files changed on this branch since it left main
plus uncommitted ones. The map is the one place that says which tests cover which part; a path it
does not know is an error that names it (run the full `scripts/test` then). scripts/test-quick
runs the result without the tests that start master/agent processes, Docker or tmux (markers
integration, docker, tmux): those stay with `scripts/test`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (source prefix, test globs), the longest matching prefix wins.
MAP: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("master/scheduler/", ("tests/unit/test_scheduler*.py",)),
    ("master/searcher/", ("tests/unit/test_searcher*.py", "tests/unit/test_searchsim.py")),
    ("master/ckpt/", ("tests/checkpoints",)),
    ("master/provisioner/", ("tests/provisioner",)),
    ("master/rm/k8s/", ("tests/k8s",)),
    ("agent/podstart.py", ("tests/k8s",)),
    ("master/web/", ("tests/web",)),
    ("master/migrations/", ("tests/api/test_migration_*.py",)),
    ("master/instance_lock.py", ("tests/unit/test_master_lock.py",)),
    ("master/login_throttle.py", ("tests/unit/test_login_throttle.py",)),
    ("master/states.py", ("tests/unit/test_states.py",)),
    ("master/trial_exits.py", ("tests/unit/test_trial_exits.py",)),
    ("master/usernames.py", ("tests/unit/test_usernames.py",)),
    ("master/jsoncheck.py", ("tests/unit/test_jsoncheck.py",)),
    ("master/", ("tests/api",)),
    ("agent/", ("tests/unit/test_agent*.py", "tests/docker/test_docker_unit.py")),
    ("harness/cli/", ("tests/unit/test_cli*.py",)),
    ("harness/api/", ("tests/unit/test_harness_client.py", "tests/unit/test_harness_retry.py")),
    ("harness/pytorch/", ("tests/unit/test_pytorch_trial*.py",)),
    ("harness/", ("tests/unit/test_harness*.py",)),
    (
        "harness/core/_tensorboard.py",
        ("tests/unit/test_tensorboard_layout.py", "tests/checkpoints/test_tensorboard_*.py"),
    ),
    ("harness/tb_serve.py", ("tests/tensorboard",)),
    ("harness/cli/tensorboard.py", ("tests/unit/test_cli_tensorboard.py", "tests/tensorboard")),
    ("master/services/task/tensorboards.py", ("tests/tensorboard", "tests/api")),
    ("detlab/protocol.py", ("tests/unit/test_protocol.py",)),
    ("detlab/expconf", ("tests/unit/test_expconf*.py",)),
    ("detlab/", ("tests/unit",)),
    ("tui/", ("tests/tui",)),
    ("bench/", ("tests/unit/test_bench*.py",)),
    ("tests/skipguard.py", ("tests/unit/test_skipguard.py",)),
    ("tests/cluster.py", ("tests/unit/test_test_helpers.py", "tests/unit/test_wait_for.py")),
    ("tests/xdist_groups.py", ("tests/unit/test_xdist_groups.py",)),
    ("tests/pgtemplate.py", ("tests/unit/test_pgtemplate.py",)),
    ("tests/quickmap.py", ("tests/unit/test_quickmap.py",)),
    ("scripts/test-quick", ("tests/unit/test_quickmap.py",)),
)


class Unmapped(ValueError):
    """Paths with no tests in the map."""


def globs_for(path: str) -> tuple[str, ...]:
    """The test globs for one repository-relative path (pure: no file system)."""
    path = path.strip().removeprefix("./").rstrip("/")
    name = Path(path).name
    if path.startswith("tests/") and (name.startswith("test_") or "." not in name):
        return (path,)  # a test file (or a folder of tests) runs itself
    best: tuple[str, tuple[str, ...]] | None = None
    for prefix, globs in MAP:
        hit = path == prefix.rstrip("/") or path.startswith(prefix)
        if hit and (best is None or len(prefix) > len(best[0])):
            best = (prefix, globs)
    if best is not None:
        return best[1]
    if path.startswith("tests/") and path.count("/") >= 2:
        return (str(Path(path).parent),)  # a helper or fixture of one test folder: that folder
    if path.startswith("tests/"):
        return ("tests/unit",)  # tests/conftest.py and other shared helpers
    return ()


def plan(paths: Iterable[str]) -> list[str]:
    """Test globs for every path, in order, without repeats; raises Unmapped naming the paths
    that no entry covers. Docs and other files that no test reads are passed over."""
    out: list[str] = []
    missing: list[str] = []
    for p in paths:
        if not p.strip() or _untested(p):
            continue
        globs = globs_for(p)
        if not globs:
            missing.append(p)
        out.extend(g for g in globs if g not in out)
    if missing:
        raise Unmapped(
            "no tests mapped for "
            + ", ".join(missing)
            + " (add them to tests/quickmap.py's MAP, or run scripts/test)"
        )
    return without_covered(out)


def without_covered(globs: list[str]) -> list[str]:
    """Drop the globs inside a folder that is itself in the list: given a file and then its folder
    (`tests/unit/test_x.py tests/unit`), pytest collects only the file and none of the folder's
    other tests."""
    folders = [g for g in globs if not g.endswith(".py") and "*" not in g]
    return [g for g in globs if not any(g != f and g.startswith(f + "/") for f in folders)]


def _untested(path: str) -> bool:
    """Docs, and the packaging files that only scripts/test's install exercises."""
    if path in ("setup.cfg", "pyproject.toml", "Procfile", ".gitignore"):
        return True
    return path.endswith((".md", ".txt", ".json")) or path.startswith(("docs/", "examples/"))


# ---- I/O at the edges -------------------------------------------------------------------------
def changed_files(root: Path = ROOT) -> list[str]:
    """Files changed on this branch since it left main, plus uncommitted and untracked ones."""

    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
        return [line for line in out.stdout.splitlines() if line]

    base = git("merge-base", "main", "HEAD")
    names = git("diff", "--name-only", base[0]) if base else []
    names += git("ls-files", "--others", "--exclude-standard")
    return [n for n in dict.fromkeys(names) if (root / n).exists()]


def expand(globs: Sequence[str], root: Path = ROOT) -> list[str]:
    """Globs to existing test paths (a glob matching nothing is dropped)."""
    out: list[str] = []
    for g in globs:
        hits = sorted(str(p.relative_to(root)) for p in root.glob(g)) if "*" in g else [g]
        out.extend(h for h in hits if (root / h).exists() and h not in out)
    return out


def _relative(arg: str) -> str:
    """A path as given on the command line, relative to the repository root when it is inside."""
    try:
        return str(Path(arg).resolve().relative_to(ROOT))
    except ValueError:
        return arg


def main(argv: Sequence[str]) -> int:
    paths = [_relative(a) for a in argv]
    try:
        tests = expand(plan(paths or changed_files()))
    except Unmapped as e:
        print(f"test-quick: {e}", file=sys.stderr)
        return 2
    if not tests:
        print("test-quick: nothing to test (no changed source files)", file=sys.stderr)
        return 2
    print("\n".join(tests))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
