"""A task's context archive (issue 38): what may be unpacked (detlab/tar_safety.py) and how the
task's launcher unpacks it (harness/task_context.py), against hostile archives."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from detlab.tar_safety import (
    Budget,
    CorruptArchive,
    UnsafeArchive,
    check_member,
    clean_name,
    link_target,
)
from harness.task_context import unpack


def tar_of(*members: tuple[str, str, bytes | str]) -> io.BytesIO:
    """A .tar.gz of (type, name, data-or-linkname) members: "f" file, "x" executable, "d" dir,
    "l" symlink, "h" hard link, "c" character device, "p" FIFO."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for kind, name, data in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            body = None
            if kind in "fx":
                raw = data if isinstance(data, bytes) else data.encode()
                info.size, info.mode, body = len(raw), 0o755 if kind == "x" else 0o644, raw
            else:
                info.type = {
                    "d": tarfile.DIRTYPE,
                    "l": tarfile.SYMTYPE,
                    "h": tarfile.LNKTYPE,
                    "c": tarfile.CHRTYPE,
                    "p": tarfile.FIFOTYPE,
                }[kind]
                info.linkname = str(data) if kind in "lh" else ""
            tar.addfile(info, io.BytesIO(body) if body is not None else None)
    buf.seek(0)
    return buf


def test_names_are_relative_and_stay_inside() -> None:
    assert clean_name("./a//b/") == "a/b"
    assert clean_name("a/./b") == "a/b"
    for bad in ("/etc/passwd", "../x", "a/../../x", "a/..", ""):
        with pytest.raises(UnsafeArchive):
            clean_name(bad)
    assert link_target("a/b", "c") == "a/c"
    assert link_target("a/b", "../c") == "c"
    for name, bad in (("a", "/etc"), ("a", ".."), ("a/b", "../../x"), ("a", "")):
        with pytest.raises(UnsafeArchive):
            link_target(name, bad)


def test_budget_stops_a_bomb_and_too_many_members() -> None:
    files: dict[str, int] = {}
    big = tarfile.TarInfo("big")
    big.size = 11
    with pytest.raises(UnsafeArchive, match="more than 10 bytes"):
        check_member(big, files, Budget(max_bytes=10))
    budget = Budget(max_members=2)
    for i in range(2):
        check_member(tarfile.TarInfo(f"f{i}"), files, budget)
    with pytest.raises(UnsafeArchive, match="more than 2 members"):
        check_member(tarfile.TarInfo("f3"), files, budget)


def test_an_honest_context_unpacks_whole(tmp_path: Path) -> None:
    archive = tar_of(
        ("d", "pkg", ""),
        ("f", "pkg/data.txt", "forty-two"),
        ("x", "run.sh", "#!/bin/sh\necho hi\n"),
        ("l", "pkg/latest", "data.txt"),
        ("h", "copy.txt", "pkg/data.txt"),
        ("f", "./deep/er/file", "x"),  # parents made on the way
    )
    assert unpack(archive, tmp_path) == 6
    assert (tmp_path / "pkg/data.txt").read_text() == "forty-two"
    assert os.access(tmp_path / "run.sh", os.X_OK)
    assert (tmp_path / "pkg/latest").is_symlink()
    assert (tmp_path / "pkg/latest").read_text() == "forty-two"
    assert (tmp_path / "copy.txt").read_text() == "forty-two"
    assert not (tmp_path / "copy.txt").is_symlink()
    assert (tmp_path / "deep/er/file").read_text() == "x"
    assert (tmp_path / "pkg/data.txt").stat().st_mtime == 1_700_000_000


@pytest.mark.parametrize(
    "members, why",
    [
        ([("f", "../escaped", "x")], "leaves the directory"),
        ([("f", "/tmp/abs-escaped", "x")], "absolute path"),
        ([("l", "out", "/etc")], "absolute path"),
        ([("l", "out", "../..")], "outside the directory"),
        ([("c", "dev", "")], "device file"),
        ([("p", "fifo", "")], "FIFO"),
        ([("h", "hl", "/etc/passwd")], "absolute path"),
        ([("h", "hl", "not-before")], "not a file before it"),
    ],
)
def test_hostile_members_are_refused(
    tmp_path: Path, members: list[tuple[str, str, str]], why: str
) -> None:
    dest = tmp_path / "work"
    dest.mkdir()
    with pytest.raises(UnsafeArchive, match=why):
        unpack(tar_of(*members), dest)
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/abs-escaped").exists()
    assert not any(p.is_symlink() for p in dest.rglob("*"))


def test_a_chain_of_links_that_leaves_is_refused(tmp_path: Path) -> None:
    """Each target reads as inside on its own; together `b` resolves to the parent."""
    dest = tmp_path / "work"
    dest.mkdir()
    archive = tar_of(("d", "sub", ""), ("l", "b", "sub/c/.."), ("l", "sub/c", ".."))
    with pytest.raises(UnsafeArchive, match="resolves outside"):
        unpack(archive, dest)
    assert not (dest / "b").exists() and not (dest / "sub/c").exists()


def test_nothing_is_written_through_a_link(tmp_path: Path) -> None:
    """A link made before a file of the same path would redirect the write: links come last,
    so the file makes a real directory and the link then finds it in the way."""
    dest = tmp_path / "work"
    dest.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    archive = tar_of(("l", "d", "sub"), ("f", "d/x", "payload"))
    with pytest.raises(OSError):
        unpack(archive, dest)
    assert not (outside / "x").exists() and (dest / "d/x").read_text() == "payload"
    # A link already in the directory is never written through either.
    (dest / "trap").symlink_to(outside / "victim")
    with pytest.raises(OSError):
        unpack(tar_of(("f", "trap", "payload")), dest)
    assert not (outside / "victim").exists()


def test_a_corrupt_archive_is_an_error(tmp_path: Path) -> None:
    good = tar_of(("f", "a", "x" * 10000)).getvalue()
    with pytest.raises(CorruptArchive, match="not a readable .tar.gz"):
        unpack(io.BytesIO(good[: len(good) // 2]), tmp_path)
    with pytest.raises(CorruptArchive):
        unpack(io.BytesIO(b"not a tar at all" * 100), tmp_path)
