"""The codebase's shape, checked: one writer per entity state, and packages that stay apart."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The transition writers; the searchers' own bookkeeping (pure, in-memory) is not an entity.
WRITERS = {ROOT / "master/services/transitions.py"}
PURE_SEARCHERS = ROOT / "master/searcher"


def _py(*dirs: str) -> list[Path]:
    """The project's own sources: not the benchmarks' peer venvs (bench/.venv-*, git-ignored)."""
    return [
        p
        for d in dirs
        for p in sorted((ROOT / d).rglob("*.py"))
        if not any(part.startswith(".venv") for part in p.relative_to(ROOT).parts)
    ]


def test_only_the_transition_writers_assign_an_entity_state() -> None:
    offenders = []
    for path in _py("master"):
        if path in WRITERS or path.is_relative_to(PURE_SEARCHERS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == "state":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"assign states through master/services/transitions.py: {offenders}"


def test_no_bulk_update_writes_a_state_column() -> None:
    # `.values(state=...)` would bypass the writers as surely as an assignment.
    pattern = re.compile(r"\.values\([^)]*\bstate\s*=")
    offenders = [
        str(p.relative_to(ROOT))
        for p in _py("master")
        if p not in WRITERS and pattern.search(p.read_text())
    ]
    assert not offenders, offenders


def test_allocation_and_agent_states_are_enums_not_literals() -> None:
    literal = re.compile(r"""["'](ASSIGNED|TERMINATED|LOST)["']""")
    offenders = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in _py("master/services", "master/api")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert not offenders, offenders


def test_master_keeps_no_mutable_state_in_module_globals() -> None:
    """Per-master state lives in master.context.MasterState, owned by the app."""
    offenders = []
    for path in _py("master"):
        if path.is_relative_to(PURE_SEARCHERS) or "migrations" in path.parts:
            continue
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.Assign | ast.AnnAssign):
                continue
            value = node.value
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            name = target.id if isinstance(target, ast.Name) else ""
            constant = name == "__all__" or name.lstrip("_").isupper()  # read-only by convention
            if (isinstance(value, ast.Dict | ast.List | ast.Set) and not constant) or (
                isinstance(value, ast.Call)
                and getattr(value.func, "attr", getattr(value.func, "id", ""))
                in ("Lock", "RLock", "Event", "Hub", "dict", "defaultdict", "deque", "TokenCache")
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_harness_and_agent_never_import_the_master() -> None:
    offenders = []
    for path in _py("agent", "harness", "tui", "detlab"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "master" or n.startswith("master.") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_create_app_starts_nothing(tmp_path: Path) -> None:
    """Building the app touches no database and starts no thread."""
    import threading

    from master.app import create_app
    from master.config import MasterConfig
    from master.context import EXTENSION

    before = threading.active_count()
    app = create_app(
        MasterConfig(db="postgresql://nobody@127.0.0.1:1/none", data_dir=tmp_path / "data")
    )
    assert threading.active_count() == before
    state = app.extensions[EXTENSION]
    assert state.kicker is None and state.jobs is None and state.master_lock is None


def test_private_modules_stay_private() -> None:
    """Other packages use harness.api's public names, never its underscore modules."""
    offenders = []
    for path in _py("agent", "harness", "tui", "master", "bench"):
        if path.is_relative_to(ROOT / "harness/api"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness.api._"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


# Blueprints that still read the database themselves, and why (each one a known exception).
QUERYING_BLUEPRINTS: set[str] = set()
_QUERY_METHODS = {"execute", "query", "scalars", "scalar", "get"}


def test_blueprints_read_the_database_through_services() -> None:
    offenders = []
    for path in _py("master/api"):
        name = str(path.relative_to(ROOT))
        if name in QUERYING_BLUEPRINTS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            f = node.func if isinstance(node, ast.Call) else None
            if (
                isinstance(f, ast.Attribute)
                and f.attr in _QUERY_METHODS
                and isinstance(f.value, ast.Attribute)
                and f.value.attr == "session"
                and isinstance(f.value.value, ast.Name)
                and f.value.value.id == "db"
            ):
                offenders.append(f"{name}:{node.lineno} db.session.{f.attr}")
    assert not offenders, f"query through master/services (not in blueprints): {offenders}"
