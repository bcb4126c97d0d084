"""The `determined` alias: given to trials by the runtimes only, never importable elsewhere; its
modules are harness's own; unsupported Determined modules fail with a clear ImportError."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.runtime.process import alias_dir, harness_root
from tests.cluster import ROOT

ALIAS = alias_dir(harness_root())


def python(
    code: str, *, alias: bool = True, args: list[str] | None = None
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), ALIAS] if alias else [str(ROOT)])
    cmd = [sys.executable, *(args or ["-c", code])]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def test_the_alias_lives_in_the_harness_and_is_not_installed() -> None:
    assert Path(ALIAS, "determined", "__init__.py").is_file()
    r = python("import determined", alias=False)
    assert r.returncode != 0 and "No module named 'determined'" in r.stderr


def test_determined_modules_are_the_harness_modules() -> None:
    r = python(
        "import determined as det, harness, harness.pytorch, harness.core\n"
        "from determined import core, pytorch\n"
        "import determined.launch.torch_distributed as td, harness.launch.torch_distributed as h\n"
        "assert core is harness.core and pytorch is harness.pytorch and td is h\n"
        "assert det.get_cluster_info is harness.get_cluster_info\n"
        "assert det.InvalidHP is harness.InvalidHP and det.LOG_FORMAT == harness.LOG_FORMAT\n"
        "assert pytorch.Trainer and pytorch.Epoch(1) == pytorch.Epoch(1) != pytorch.Batch(1)\n"
        "from determined.experimental import client\n"
        "print('ok')"
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize(
    ("module", "why"),
    [
        ("determined.keras", "TensorFlow/Keras"),
        ("determined.deepspeed", "determined.pytorch.deepspeed"),
        ("determined.pytorch.lightning", "Lightning"),
        ("determined.launch.horovod", "Horovod"),
    ],
)
def test_unsupported_modules_name_themselves(module: str, why: str) -> None:
    r = python(f"import {module}")
    assert r.returncode != 0
    assert "ImportError" in r.stderr or "ModuleNotFoundError" in r.stderr
    assert f"No module named '{module}'" in r.stderr and why in r.stderr
    assert "docs/determined-compat.md" in r.stderr


def test_a_module_the_harness_lacks_is_named() -> None:
    r = python("import determined.common.api")  # determined.common itself has `util` only
    assert "No module named 'determined.common.api'" in r.stderr
    assert "harness.common.api" in r.stderr


def test_launch_entrypoints_run_under_their_determined_names() -> None:
    r = python("", args=["-m", "determined.launch.wrap_rank", "3", "--", "echo", "hi"])
    assert r.returncode == 0 and r.stdout == "[rank=3] hi\n", r.stderr
    r = python("", args=["-m", "determined.launch.torch_distributed", "--help"])
    assert r.returncode == 0 and "--trial" in r.stdout
