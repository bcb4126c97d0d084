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
    assert state.scheduling.kicker is None
    assert state.lifecycle.jobs is None and state.lifecycle.master_lock is None


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


def test_experiment_configs_are_read_typed() -> None:
    # `exp.conf` (detlab.expconf.ExperimentConfig) is the one typed reading of a stored config:
    # `exp.config.get("max_restarts", 5)` would restate a default the schema already sets.
    flask = {"app", "current_app"}  # Flask's own config mapping is not an experiment's
    offenders = []
    for path in _py("master"):
        for node in ast.walk(ast.parse(path.read_text())):
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "get":
                    target = node.func.value
            elif isinstance(node, ast.Subscript):
                target = node.value
            if isinstance(target, ast.BoolOp):  # `(exp.config or {}).get(...)`
                target = target.values[0]
            if not (isinstance(target, ast.Attribute) and target.attr == "config"):
                continue
            owner = target.value
            if isinstance(owner, ast.Name) and (owner.id in flask or owner.id == "Experiment"):
                continue  # Flask's config; Experiment.config[...] is a SQL JSON path
            offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"read experiment configs through exp.conf: {offenders}"


# Models with a state column: a new row of each is born through the state machine.
STATEFUL = {"Experiment", "Trial", "Task", "Allocation", "Agent", "Checkpoint", "Instance"}
# Constructions that are not births, each with its reason.
NOT_BIRTHS = {
    # A stand-in for a registered version whose checkpoint row is gone: built to describe and
    # download it, never added to the session.
    ("master/registry/service.py", "registered_checkpoint"),
}


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _called(node: ast.AST) -> set[str]:
    """Names called bare (`Trial(...)`, `born(...)`): the master imports models by name, so
    `compute_v1.Instance(...)` (a cloud SDK's) is not one of them."""
    return {
        n.func.id
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }


def test_every_new_stateful_row_is_born_through_the_state_machine() -> None:
    """A function that builds an Experiment, Trial, Task, Allocation, Agent, Checkpoint or
    Instance also records its birth (`transitions.born`: its first `state_changes` row)."""
    offenders = []
    for path in _py("master"):
        if "migrations" in path.parts:
            continue
        rel = str(path.relative_to(ROOT))
        for fn in _functions(ast.parse(path.read_text())):
            built = _called(fn) & STATEFUL
            if built and "born" not in _called(fn) and (rel, fn.name) not in NOT_BIRTHS:
                offenders.append(f"{rel}:{fn.lineno} {fn.name} builds {sorted(built)}")
    assert not offenders, f"record births with transitions.born: {offenders}"


def test_every_state_column_is_an_enum() -> None:
    """`state` columns (and the task's `type`) are `Mapped[<StrEnum>]`, never plain strings."""
    from sqlalchemy import Enum

    from master.db import db

    columns = [
        (m.class_.__name__, c)
        for m in db.Model.registry.mappers
        for c in m.columns
        if c.name == "state" or (m.class_.__name__ == "Task" and c.name == "type")
    ]
    offenders = [
        f"{name}.{c.name}"
        for name, c in columns
        if not isinstance(c.type, Enum) or c.type.enum_class is None
    ]
    assert not offenders, offenders
    checked = {m.class_.__name__ for m in db.Model.registry.mappers if "state" in m.columns}
    assert checked >= STATEFUL


def test_context_imports_no_service() -> None:
    """master/context.py (what a master keeps in memory) sits below the services: importing one
    (even for a type) would tie every service back into it in one import circle."""
    tree = ast.parse((ROOT / "master/context.py").read_text())
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    ]
    offenders = [m for m in imported if m and m.startswith(("master.services", "master.rm"))]
    assert not offenders, offenders
