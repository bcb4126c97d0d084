"""Packing the model directory: skipped dirs, .detignore, the size limit."""

from __future__ import annotations

import argparse
import io
import os
import tarfile
from pathlib import Path

import pytest

from harness.cli import _modeldef
from harness.cli._common import CliError
from harness.cli._modeldef import build_model_def, is_ignored


def _names(data: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return set(tar.getnames())


def _tree(root: Path) -> None:
    for rel in [
        "train.py",
        "lib/model.py",
        "lib/__pycache__/model.pyc",
        ".git/HEAD",
        ".venv/bin/python",
        "data/big.csv",
        "notes.log",
        "sub/notes.log",
        "ckpt/a.pt",
        "keep/ckpt/b.pt",
    ]:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel)


def test_skips_and_detignore(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / ".detignore").write_text("# comment\n\ndata/\n*.log\n/ckpt\n")
    names = _names(build_model_def(tmp_path))
    assert {"train.py", "lib/model.py", "keep/ckpt/b.pt", ".detignore"} <= names
    for gone in [
        "lib/__pycache__",
        ".git",
        ".venv",
        "data",
        "data/big.csv",
        "notes.log",
        "sub/notes.log",
        "ckpt/a.pt",
    ]:
        assert gone not in names
    assert not any(n.startswith(("/", "./")) for n in names)


def test_ignore_rules() -> None:
    assert is_ignored("a/b.log", False, ["*.log"])
    assert not is_ignored("data", False, ["data/"])  # dir-only pattern, file named data
    assert is_ignored("data", True, ["data/"])
    assert is_ignored("x/y/z.bin", False, ["x/**"])
    assert not is_ignored("keep/ckpt", True, ["/ckpt"])


def test_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "weights.bin").write_bytes(os.urandom(64 * 1024))
    monkeypatch.setattr(_modeldef, "MAX_MODEL_DEF_BYTES", 16 * 1024)
    with pytest.raises(CliError) as info:
        build_model_def(tmp_path)
    msg = str(info.value)
    assert "64.0 KiB" in msg and "16.0 KiB limit" in msg and ".detignore" in msg
    (tmp_path / ".detignore").write_text("*.bin\n")
    assert "train.py" in _names(build_model_def(tmp_path))


def test_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="does not exist"):
        build_model_def(tmp_path / "nope")


def _parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _modeldef.add_context_args(parser)
    return parser.parse_args(list(argv))


def test_a_tasks_context_packs_like_a_model_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`det cmd run|notebook start|shell start -c DIR [-i PATH]` (issue 38): the same
    .detignore rules, its own words over the limit, nothing without either flag."""
    _tree(tmp_path)
    (tmp_path / ".detignore").write_text("data/\n*.log\n")
    extra = tmp_path.parent / f"{tmp_path.name}-extra.txt"
    extra.write_text("extra")
    data = _modeldef.pack_context(_parsed("-c", str(tmp_path), "-i", str(extra)))
    assert data is not None
    names = _names(data)
    assert {"train.py", "lib/model.py", extra.name} <= names
    assert not names & {"data/big.csv", "notes.log", ".git"}
    assert _modeldef.pack_context(_parsed()) is None
    (tmp_path / "weights.bin").write_bytes(os.urandom(64 * 1024))
    monkeypatch.setattr(_modeldef, "MAX_MODEL_DEF_BYTES", 16 * 1024)
    with pytest.raises(CliError) as info:
        _modeldef.pack_context(_parsed("--context", str(tmp_path)))
    msg = str(info.value)
    assert msg.startswith("context directory") and "limit for a task's context" in msg
    with pytest.raises(CliError, match="context directory .* does not exist"):
        _modeldef.pack_context(_parsed("-c", str(tmp_path / "nope")))
