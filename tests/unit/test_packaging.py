"""`pip install detlab` (no extras) is the harness and `det`: nothing they import at module level
may need the servers' dependencies. Checked in a fresh interpreter that can import only the
standard library, detlab's own packages and what pyproject.toml's base dependencies install."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
OURS = {"detlab", "master", "agent", "harness", "tui"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]


def _top_levels(dist: metadata.Distribution) -> set[str]:
    names = set()
    for f in dist.files or []:
        top = f.parts[0]
        if top.endswith((".dist-info", ".data")) or top == "..":
            continue
        names.add(top.removesuffix(".py"))
    return names


def _base_modules() -> set[str]:
    """The top-level modules the base dependencies install, with theirs, recursively."""
    seen: set[str] = set()
    modules: set[str] = set()
    todo = [_name(r) for r in PROJECT["dependencies"]]
    while todo:
        name = todo.pop().lower()
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        modules |= _top_levels(dist)
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(_name(req))
    return modules


# Imports what `det` and a trial's harness import, then runs `det NOUN --help` for every noun.
_PROBE = """
import importlib.abc, json, sys
allowed = set(json.loads(sys.argv[1]))
refused = []

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in allowed or top in sys.stdlib_module_names:
            return None
        refused.append(name)
        raise ImportError(f"{name} is not a base dependency")

sys.meta_path.insert(0, Refuse())
import harness.core, harness.client, harness.api, harness.launch, detlab.expconf
from harness.cli.main import build_parser, main
nouns = [a for a in build_parser()._subparsers._group_actions[0].choices]
for noun in nouns:
    try:
        main([noun, "--help"])
    except SystemExit as e:
        assert e.code == 0, (noun, e.code)
print(json.dumps({"nouns": nouns, "refused": refused}))
"""


def test_the_base_install_runs_det_and_the_harness() -> None:
    allowed = sorted(_base_modules() | OURS)
    assert "flask" not in allowed and "sqlalchemy" not in allowed and "docker" not in allowed
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(allowed)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"experiment", "trial", "checkpoint", "model", "template"} <= set(result["nouns"])
    # What was refused was probed inside try/except (orjson, urllib3's brotli...): optional.
    assert "flask" not in {name.partition(".")[0] for name in result["refused"]}


def test_the_servers_dependencies_are_extras_and_dev_pulls_them() -> None:
    base = {_name(r).lower() for r in PROJECT["dependencies"]}
    extras = PROJECT["optional-dependencies"]
    for server in ("flask", "sqlalchemy", "alembic", "waitress", "docker", "textual", "boto3"):
        assert server not in base
    assert {_name(r).lower() for r in extras["master"]} >= {"flask", "sqlalchemy", "waitress"}
    assert {"docker", "nvidia-ml-py"} <= {_name(r).lower() for r in extras["agent"]}
    # The tests run every part: dev pulls every extra but torch and bench (scripts/install adds
    # torch; bench is the benchmarks' own).
    (self_extra,) = [r for r in extras["dev"] if r.startswith("detlab[")]
    pulled = set(self_extra[len("detlab[") : -1].split(","))
    assert pulled == set(extras) - {"dev", "torch", "bench"}, pulled
    # The quick start needs none of these: each is an extra of its own.
    assert {"boto3", "optuna", "google-cloud-compute"}.isdisjoint(
        _name(r).lower() for r in extras["master"]
    )
    scripts = PROJECT["scripts"]
    assert scripts["det"] == "harness.cli.main:main" and set(scripts) == {
        "det",
        "det-master",
        "det-agent",
        "det-tui",
    }
