"""`python3 -m harness.task_context -- CMD...`: unpack the task's `--context` into the working
directory, then exec CMD (the same process: its signals, output and exit code are CMD's own).

The master runs a command, notebook or shell that has a context through this launcher
(master/services/task/commands.with_context), so every runtime (a local process, a container,
a Slurm job, a pod) gets it the same way, as the task's own identity, before its program
starts. The archive is fetched with the task's session token (DET_SESSION_TOKEN, its
allocation's: no other token reads it), checked against DET_TASK_CONTEXT_SHA256, and unpacked
member by member under detlab/tar_safety.py's rules: no name outside the directory, no device
file, no write through a symbolic link (links are made last, and each must still resolve inside
the directory once all exist), bounded size. Anything wrong: a message and exit 1, CMD never runs.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import IO

from detlab.tar_safety import (
    MAX_UNPACKED_BYTES,
    Budget,
    CorruptArchive,
    UnsafeArchive,
    clean_name,
    safe_members,
)

COPY = 1 << 20


class ContextError(Exception):
    """The context could not be fetched, verified or unpacked (the message says why)."""


def _inside(root: Path, path: str) -> bool:
    real = os.path.realpath(path)
    return real == str(root) or real.startswith(str(root) + os.sep)


def _make_dirs(root: Path, rel: str) -> Path:
    """`root/rel` as a directory, each component created or found a real directory (never a
    symbolic link: nothing is written through one)."""
    here = root
    for part in [p for p in rel.split("/") if p]:
        here = here / part
        try:
            os.mkdir(here, 0o777)  # the task's umask decides
        except FileExistsError:
            if here.is_symlink() or not here.is_dir():
                raise UnsafeArchive(f"{rel!r} is in the way: {here} is not a directory") from None
    return here


def _write(path: Path, src: IO[bytes], size: int, mode: int, mtime: float) -> None:
    # O_NOFOLLOW: a symbolic link already at `path` is refused, never followed.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        left = size
        while left > 0:
            block = src.read(min(COPY, left))
            if not block:
                raise ContextError(f"the archive ends inside {path.name}")
            out.write(block)
            left -= len(block)
    os.utime(path, (mtime, mtime))


def unpack(archive: IO[bytes], dest: Path) -> int:
    """Unpack the .tar.gz `archive` into `dest`; the number of members. UnsafeArchive for a
    member that may not be unpacked, CorruptArchive for one that does not read to its end."""
    root = dest.resolve()
    budget = Budget()
    links: list[tuple[str, str]] = []
    for tar, member, name in safe_members(archive, budget):
        path = root / name
        if member.isdir():
            _make_dirs(root, name)
        elif member.issym():
            links.append((name, member.linkname))  # made last: see `_link`
        else:
            parent = _make_dirs(root, os.path.dirname(name))
            mode = 0o777 if member.mode & 0o111 else 0o666  # the task's umask decides the rest
            if member.islnk():  # a copy of the archive's own earlier file
                with open(root / clean_name(member.linkname), "rb") as src:
                    _write(path, src, os.fstat(src.fileno()).st_size, mode, member.mtime)
                continue
            data = tar.extractfile(member)
            assert data is not None  # a regular file always has data
            _write(parent / path.name, data, member.size, mode, member.mtime)
    _link(root, links)
    return budget.members


def _link(root: Path, links: list[tuple[str, str]]) -> None:
    """Make the symbolic links, then check that each resolves inside `root` with all of them
    in place (a link through another link can leave the directory although each target reads
    as inside on its own); one that does not: all are removed and the archive refused."""
    made = []
    try:
        for name, target in links:
            parent = _make_dirs(root, os.path.dirname(name))
            os.symlink(target, parent / os.path.basename(name))
            made.append(parent / os.path.basename(name))
        for path in made:
            if not _inside(root, str(path)):
                raise UnsafeArchive(
                    f"symbolic link {path.relative_to(root)} resolves outside the directory"
                )
    except (UnsafeArchive, OSError):
        for path in made:
            path.unlink(missing_ok=True)
        raise


def fetch(master: str, token: str, task_id: str, sha256: str) -> IO[bytes]:
    """The task's archive in an anonymous temporary file, verified against `sha256`."""
    import requests

    from harness.api import DetError, Session

    session = Session(master, token, timeout=120.0, outage_s=60.0)
    out = tempfile.TemporaryFile()  # noqa: SIM115  # the caller closes it
    digest, got = hashlib.sha256(), 0
    try:
        with session.request("GET", f"/tasks/{task_id}/context", stream=True) as resp:
            for block in resp.iter_content(COPY):
                got += len(block)
                if got > MAX_UNPACKED_BYTES:
                    raise ContextError(f"the context is over {MAX_UNPACKED_BYTES:,} bytes")
                digest.update(block)
                out.write(block)
    except (DetError, requests.RequestException, OSError) as e:
        out.close()
        raise ContextError(f"cannot fetch the task's context: {e}") from e
    if digest.hexdigest() != sha256.lower():
        out.close()
        raise ContextError(
            f"the context fetched ({got:,} bytes) does not match its sha256 "
            f"(expected {sha256}, got {digest.hexdigest()})"
        )
    out.seek(0)
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.stderr.write("usage: python3 -m harness.task_context -- COMMAND [ARG...]\n")
        return 2
    sha = os.environ.get("DET_TASK_CONTEXT_SHA256")
    if sha:
        needed = ("DET_MASTER", "DET_SESSION_TOKEN", "DET_TASK_ID")
        missing = [v for v in needed if not os.environ.get(v)]
        if missing:
            sys.stderr.write(f"det: cannot fetch the task's context: {', '.join(missing)} unset\n")
            return 1
        try:
            with fetch(
                os.environ["DET_MASTER"],
                os.environ["DET_SESSION_TOKEN"],
                os.environ["DET_TASK_ID"],
                sha,
            ) as archive:
                n = unpack(archive, Path.cwd())
        except (ContextError, UnsafeArchive, CorruptArchive, OSError) as e:
            sys.stderr.write(f"det: the task's context was not unpacked: {e}\n")
            return 1
        sys.stderr.write(f"det: unpacked the task's context ({n} entries) into {Path.cwd()}\n")
        sys.stderr.flush()
    # The session token stays: the harness's Core API inside the task uses it.
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        sys.stderr.write(f"det: cannot run {argv[0]!r}: {e}\n")
        return 127 if isinstance(e, FileNotFoundError) else 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
