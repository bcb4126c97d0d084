"""extract_checked: the model-definition extraction for a Python without tarfile's data filter
(the launcher of a Slurm job in a container runs on the image's Python)."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

import pytest

from agent.modeldef import ModelDefError, extract_checked


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, body in members:
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body) if info.isfile() else None)
    return path


def _file(name: str, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info


def test_plain_files_are_extracted_without_special_bits(tmp_path: Path) -> None:
    sub = tarfile.TarInfo("pkg")
    sub.type = tarfile.DIRTYPE
    sub.mode = 0o755
    src = _tar(
        tmp_path / "m.tar.gz",
        [(sub, b""), (_file("pkg/model_def.py"), b"x = 1\n"), (_file("run.sh", 0o6755), b"")],
    )
    dest = tmp_path / "out"
    dest.mkdir()
    with tarfile.open(src) as tar:
        extract_checked(tar, dest)
    assert (dest / "pkg" / "model_def.py").read_text() == "x = 1\n"
    assert not (dest / "run.sh").stat().st_mode & (stat.S_ISUID | stat.S_ISGID)


@pytest.mark.parametrize(
    ("name", "kind", "why"),
    [
        ("../escape.py", tarfile.REGTYPE, "outside"),
        ("/etc/evil.py", tarfile.REGTYPE, "outside"),
        ("a/../../escape.py", tarfile.REGTYPE, "outside"),
        ("link", tarfile.SYMTYPE, "not a file or directory"),
        ("hard", tarfile.LNKTYPE, "not a file or directory"),
        ("dev", tarfile.CHRTYPE, "not a file or directory"),
    ],
)
def test_anything_else_is_refused_and_nothing_is_written(
    tmp_path: Path, name: str, kind: bytes, why: str
) -> None:
    bad = _file(name)
    bad.type = kind
    bad.linkname = "/etc/passwd"
    src = _tar(tmp_path / "m.tar.gz", [(_file("ok.py"), b""), (bad, b"")])
    dest = tmp_path / "out"
    dest.mkdir()
    with tarfile.open(src) as tar, pytest.raises(ModelDefError, match=why):
        extract_checked(tar, dest)
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "escape.py").exists()
