"""Which files of the model directory an experiment's entrypoint needs (pure; CLI and master).

`python3 trian.py` with only `train.py` uploaded would be accepted and then fail on every
restart; the CLI checks before uploading and the master rejects it at submit (400), both with
this module's message.
"""

from __future__ import annotations

import difflib
import io
import re
import shlex
import tarfile
from collections.abc import Collection
from typing import IO

# A Trial class entrypoint (`model_def:MyTrial`); the master runs it with the harness launcher.
TRIAL_CLASS = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# Modules that come with the harness, not with the model directory.
PROVIDED_MODULES = ("harness", "determined")
SCRIPT_SUFFIXES = (".py", ".sh")


def needed_files(entrypoint: str) -> list[tuple[str, tuple[str, ...]]]:
    """`[(what the entrypoint names, paths any one of which satisfies it)]`."""
    text = entrypoint.strip()
    if TRIAL_CLASS.match(text):
        module = text.split(":", 1)[0]
        if module.split(".", 1)[0] in PROVIDED_MODULES:
            return []
        base = module.replace(".", "/")
        return [(f"{base}.py", (f"{base}.py", f"{base}/__init__.py"))]
    try:
        words = shlex.split(text)
    except ValueError:
        return []  # unbalanced quotes: the schema's business, not ours
    out: list[tuple[str, tuple[str, ...]]] = []
    for word in words:
        if not word.endswith(SCRIPT_SUFFIXES) or "=" in word or "$" in word or "*" in word:
            continue
        if word.startswith(("/", "~", "-")):
            continue  # an absolute path (in the image) or an option
        path = word[2:] if word.startswith("./") else word
        out.append((word, (path,)))
    return out


def missing_file_message(entrypoint: str, names: Collection[str]) -> str | None:
    """None when every file the entrypoint names is among `names` (the model directory's
    paths, relative, `/`-separated); else a message naming the missing file."""
    have = {n[2:] if n.startswith("./") else n for n in names}
    for shown, candidates in needed_files(entrypoint):
        if any(c in have for c in candidates):
            continue
        scripts = sorted(n for n in have if n.endswith(SCRIPT_SUFFIXES))
        close = difflib.get_close_matches(candidates[0], scripts, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        listed = ", ".join(scripts[:8]) + (", ..." if len(scripts) > 8 else "")
        where = f" (its scripts: {listed})" if scripts else " (it has no scripts)"
        return f"the entrypoint names {shown}, which is not in the model directory{where}{hint}"
    return None


def tar_names(model_def: bytes | IO[bytes]) -> set[str] | None:
    """The file paths inside a model definition `.tar.gz` (None when it cannot be read). A
    stream (the master's spooled upload) is read from where it stands and put back there."""
    if isinstance(model_def, bytes | bytearray | memoryview):
        return _names(io.BytesIO(model_def))
    try:
        here = model_def.tell()
    except (AttributeError, OSError, ValueError):
        return None  # not seekable: reading it here would lose what the master must store
    try:
        return _names(model_def)
    finally:
        model_def.seek(here)


def _names(fileobj: IO[bytes]) -> set[str] | None:
    try:
        with tarfile.open(fileobj=fileobj, mode="r:*") as tar:
            return {m.name[2:] if m.name.startswith("./") else m.name for m in tar.getmembers()}
    except (tarfile.TarError, OSError, EOFError):
        return None
