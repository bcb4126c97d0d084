"""One definition per shared state enum: the master's tables, the SDK's ExperimentState and
TrialState, and the CLI's terminal states are detlab/states.py's, and nothing else defines an
enum of those names."""

from __future__ import annotations

import ast
from pathlib import Path

import detlab.constants
import detlab.states
import master.states
from harness import client

ROOT = Path(__file__).resolve().parents[2]
SHARED = {"State", "ExperimentState", "TrialState", "TaskType", "TaskState"}


def test_every_side_uses_the_one_definition() -> None:
    assert client.ExperimentState is detlab.states.State is master.states.State
    assert client.TrialState is detlab.states.State
    assert master.states.TaskType is detlab.states.TaskType
    assert master.states.TaskState is detlab.states.TaskState
    assert detlab.constants.TERMINAL_STATES is detlab.states.TERMINAL_STATES
    assert master.states.TERMINAL is detlab.states.TERMINAL_STATES
    assert master.states.TERMINAL_TASK is detlab.states.TERMINAL_TASK_STATES


def test_members_read_and_compare_as_the_apis_strings() -> None:
    state = client.ExperimentState("COMPLETED")
    assert state == "COMPLETED" and state.value == "COMPLETED" and str(state) == "COMPLETED"
    assert "ERROR" in detlab.constants.TERMINAL_STATES
    assert "PAUSED" not in detlab.constants.TERMINAL_STATES


def test_no_other_module_defines_a_shared_enum() -> None:
    found = []
    for folder in ("detlab", "master", "harness", "agent", "tui"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == ROOT / "detlab" / "states.py" or "node_modules" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            found += [
                f"{path.relative_to(ROOT)}:{n.lineno} {n.name}"
                for n in ast.walk(tree)
                if isinstance(n, ast.ClassDef) and n.name in SHARED
            ]
    assert found == [], "define shared state enums in detlab/states.py only"
