"""What a user's tar archive may hold before any of it is written to disk (no file system I/O:
the caller decides what to do with each member).

A task's `--context` is an archive its owner made, unpacked on an agent's machine: it must
never write outside the task's directory, nor create device files, nor fill the disk. The
master checks every member when the archive arrives (a 400 naming the first bad member) and the
task's launcher checks them again while unpacking (harness/task_context.py), with the same
rules from here: regular files, directories, symbolic links that stay inside the directory, and
hard links to a file of the archive itself; relative names without `..`; bounded totals.
"""

from __future__ import annotations

import gzip
import posixpath
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

# What unpacking a context may write at most. A context is at most ~96 MiB compressed (the
# master's `max_model_def_bytes`): these bounds stop a compression bomb, not an honest upload.
MAX_UNPACKED_BYTES = 2 * 1024 * 1024 * 1024
MAX_MEMBERS = 200_000
MAX_NAME_CHARS = 4096


class UnsafeArchive(ValueError):
    """The archive holds something that may not be unpacked (the message names it)."""


class CorruptArchive(ValueError):
    """The archive is not a .tar.gz that reads to its end (the message says where it broke)."""


def clean_name(name: str) -> str:
    """The member's name relative to the destination (`./a/b/` -> `a/b`); UnsafeArchive for
    an absolute name, a `..` component, NUL, or a name naming the destination itself."""
    if not name or len(name) > MAX_NAME_CHARS or "\x00" in name:
        raise UnsafeArchive(f"member name {name[:200]!r} is empty, too long or holds NUL")
    if name.startswith("/"):
        raise UnsafeArchive(f"member {name!r} has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"member {name!r} leaves the directory ('..')")
    return "/".join(parts)


def link_target(name: str, linkname: str) -> str:
    """Where a symbolic link `name` -> `linkname` points, relative to the destination (read
    lexically); UnsafeArchive when it is absolute or leaves the destination."""
    if not linkname or "\x00" in linkname:
        raise UnsafeArchive(f"symbolic link {name!r} has an empty target")
    if linkname.startswith("/"):
        raise UnsafeArchive(f"symbolic link {name!r} points to an absolute path ({linkname!r})")
    target = posixpath.normpath(posixpath.join(posixpath.dirname(name), linkname))
    if target == ".." or target.startswith("../"):
        raise UnsafeArchive(f"symbolic link {name!r} points outside the directory ({linkname!r})")
    return "" if target == "." else target


@dataclass
class Budget:
    """Running totals of an archive's members: UnsafeArchive once one is over its bound."""

    max_bytes: int = MAX_UNPACKED_BYTES
    max_members: int = MAX_MEMBERS
    bytes: int = 0
    members: int = 0

    def add(self, name: str, size: int) -> None:
        self.members += 1
        self.bytes += max(0, size)
        if self.members > self.max_members:
            raise UnsafeArchive(f"the archive has more than {self.max_members:,} members")
        if self.bytes > self.max_bytes:
            raise UnsafeArchive(
                f"the archive unpacks to more than {self.max_bytes:,} bytes (at {name!r})"
            )


def check_member(member: tarfile.TarInfo, files: dict[str, int], budget: Budget) -> str:
    """The member's clean name, once it is known to be safe to unpack; `files` maps the clean
    names of the regular files seen before it to their sizes (a hard link may only name one of
    those: it is unpacked as a copy) and is updated. UnsafeArchive names what is wrong."""
    name = clean_name(member.name)
    if member.isfile() and not member.issparse():
        if not name:
            raise UnsafeArchive(f"file member {member.name!r} has no name")
        budget.add(name, member.size)
        files[name] = member.size
        return name
    if member.isdir():
        budget.add(name, 0)
        return name
    if member.issym():
        if not name:
            raise UnsafeArchive(f"symbolic link {member.name!r} replaces the directory itself")
        link_target(name, member.linkname)
        budget.add(name, 0)
        return name
    if member.islnk():
        target = clean_name(member.linkname)
        if target not in files:
            raise UnsafeArchive(
                f"hard link {member.name!r} names {member.linkname!r}, not a file before it"
            )
        budget.add(name, files[target])
        files[name] = files[target]
        return name
    kind = (
        "a device file"
        if member.ischr() or member.isblk()
        else "a FIFO"
        if member.isfifo()
        else "a sparse file"
        if member.issparse()
        else "not a file, directory or link"
    )
    raise UnsafeArchive(f"member {member.name!r} is {kind}")


def safe_members(
    fileobj: IO[bytes], budget: Budget | None = None
) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo, str]]:
    """Each member of the .tar.gz `fileobj`, in order, with its clean name, once checked
    (`check_member`): read as a stream, never seeking. The gzip stream is read to its end, so a
    truncated or altered archive fails its CRC (CorruptArchive) even past the tar's last member.
    """
    files: dict[str, int] = {}
    budget = budget or Budget()
    try:
        # Nested, not parenthesised: the launcher runs on any image's python3 (3.8 and up).
        with gzip.GzipFile(fileobj=fileobj, mode="rb") as gz:
            with tarfile.open(fileobj=gz, mode="r|") as tar:
                for member in tar:
                    yield tar, member, check_member(member, files, budget)
            while gz.read(1 << 20):
                pass
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise CorruptArchive(f"not a readable .tar.gz archive: {e or type(e).__name__}") from e
