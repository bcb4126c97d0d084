"""Pack a directory into the `.tar.gz` the master stores: a model definition (`det experiment
create`) or a task's context (`det cmd run|notebook start|shell start --context`), with the
same `.detignore` rules."""

from __future__ import annotations

import argparse
import fnmatch
import io
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path

from detlab.constants import MAX_MODEL_DEF_BYTES
from harness.cli._common import CliError, size

ALWAYS_SKIPPED = frozenset({".git", "__pycache__", ".venv"})
DETIGNORE = ".detignore"


def read_detignore(root: Path) -> list[str]:
    """Patterns of `.detignore` (gitignore-like: `#` comments, `dir/`, `/anchored`, globs)."""
    try:
        text = (root / DETIGNORE).read_text()
    except OSError:
        return []
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def is_ignored(rel: str, is_dir: bool, patterns: list[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    for pat in patterns:
        dir_only = pat.endswith("/")
        pat = pat.rstrip("/")
        if dir_only and not is_dir:
            continue
        if "/" in pat:  # anchored at the model directory
            if fnmatch.fnmatch(rel, pat.lstrip("/")):
                return True
        elif fnmatch.fnmatch(name, pat):
            return True
    return False


def collect(root: Path) -> list[tuple[Path, str]]:
    """`(path, relative name)` of every file and directory to pack, sorted."""
    patterns = read_detignore(root)
    out: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_here = here.relative_to(root).as_posix()
        prefix = "" if rel_here == "." else rel_here + "/"
        keep = []
        for d in sorted(dirnames):
            rel = prefix + d
            if d in ALWAYS_SKIPPED or is_ignored(rel, True, patterns):
                continue
            keep.append(d)
            out.append((here / d, rel))
        dirnames[:] = keep
        for f in sorted(filenames):
            rel = prefix + f
            if not is_ignored(rel, False, patterns):
                out.append((here / f, rel))
    return out


def with_includes(
    entries: list[tuple[Path, str]], includes: Sequence[str | Path]
) -> list[tuple[Path, str]]:
    """Determined's `det e create -i PATH`: each extra file or directory is packed at the top
    of the model definition under its own name (a directory with its `.detignore` applied)."""
    out = list(entries)
    taken = {rel.split("/", 1)[0] for _, rel in entries}
    for inc in includes:
        path = Path(inc)
        name = path.resolve().name
        if not path.exists():
            raise CliError(f"--include {inc}: no such file or directory")
        if name in taken:
            raise CliError(f"--include {inc}: the model definition already has {name!r}")
        taken.add(name)
        out.append((path, name))
        if path.is_dir():
            out += [(p, f"{name}/{rel}") for p, rel in collect(path)]
    return out


def build_model_def(
    model_dir: str | Path | None,
    limit: int | None = None,
    includes: Sequence[str | Path] = (),
    what: tuple[str, str] = ("model directory", "a model definition"),
) -> bytes:
    """The `.tar.gz` bytes of `model_dir` (and `includes`); refuses (CliError) to exceed
    `limit` compressed. `what`: the directory's and the archive's names in messages."""
    limit = MAX_MODEL_DEF_BYTES if limit is None else limit
    root = Path(model_dir) if model_dir is not None else None
    if root is not None and not root.is_dir():
        raise CliError(f"{what[0]} {model_dir} does not exist or is not a directory")
    entries = with_includes(collect(root) if root is not None else [], includes)
    raw = sum(p.lstat().st_size for p, _ in entries if not p.is_dir())

    def too_large(compressed: int) -> CliError:
        return CliError(
            f"{what[0]} {model_dir} is too large: {size(raw)} in {len(entries)} entries "
            f"(at least {size(compressed)} compressed), over the {size(limit)} limit for "
            f"{what[1]}; add data sets, checkpoints and other large files to "
            f"{(root or Path('.')) / DETIGNORE}"
        )

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for path, rel in entries:
            tar.add(path, arcname=rel, recursive=False)
            if buf.tell() > limit:
                raise too_large(buf.tell())
    data = buf.getvalue()
    if len(data) > limit:
        raise too_large(len(data))
    return data


def add_context_args(parser: argparse.ArgumentParser) -> None:
    """Determined's `-c/--context DIR` and `-i/--include PATH` of a command, notebook or shell."""
    parser.add_argument(
        "-c",
        "--context",
        metavar="DIR",
        help="a directory whose files appear in the task's working directory (.detignore "
        "honoured; at most the master's model-definition limit, 96 MiB compressed)",
    )
    parser.add_argument(
        "-i",
        "--include",
        action="append",
        default=[],
        metavar="PATH",
        help="a file or directory to add at the top of the context (repeatable)",
    )


def pack_context(args: argparse.Namespace) -> bytes | None:
    """The task's context as .tar.gz (None without `--context` or `--include`)."""
    context, includes = getattr(args, "context", None), getattr(args, "include", None) or []
    if not context and not includes:
        return None
    return build_model_def(
        context, includes=includes, what=("context directory", "a task's context")
    )
