"""master/rm/slurm_handover.py: the ACL encoding, whom a job runs as, and reading the files a
(hostile) job wrote: links, FIFOs and others' files are refused, never followed or waited on."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from master.rm import slurm_handover as h
from master.rm.slurm_cli import JobUser
from master.rm.slurm_config import SlurmConfig


def test_the_acl_is_a_version_header_and_entries_sorted_by_tag_and_id() -> None:
    got = h.acl_xattr(h.owner_and(1234, h.R | h.W, h.R))
    undefined = 0xFFFFFFFF
    want = struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", *e)
        for e in [(0x01, 6, undefined), (0x02, 4, 1234), (0x04, 0, undefined)]
        + [(0x10, 4, undefined), (0x20, 0, undefined)]
    )
    assert got == want


def lookup(name: str) -> int:
    return {"alice": 2001}[name]


@pytest.mark.parametrize(
    ("sudo", "root", "linked", "sudo_user", "want"),
    [
        (True, False, 2000, "alice", 2001),  # sudo -u alice: alice's uid here
        (True, False, None, "alice", 2001),  # sudo to user_name: looked up
        (False, True, 2000, None, 2000),  # root with --uid
        (False, False, 2000, None, 500),  # neither: the master's own user
        (True, False, 2000, None, 500),  # sudo, but nobody to sudo to
    ],
)
def test_whom_the_job_runs_as(
    sudo: bool, root: bool, linked: int | None, sudo_user: str | None, want: int
) -> None:
    assert h.job_uid(sudo, root, linked, sudo_user, 500, lookup) == want


def test_a_sudo_user_unknown_here_is_named() -> None:
    cfg = SlurmConfig(job_storage_root="/j", sudo_authorized=True)
    with pytest.raises(KeyError, match="Unix user detlab-no-such-user is unknown"):
        h.job_identity(cfg, JobUser("detlab-no-such-user", None, None), as_root=False)
    assert h.job_identity(cfg, JobUser("root", 0, 0), as_root=False) == (0, "root")
    plain = SlurmConfig(job_storage_root="/j")
    assert h.job_identity(plain, JobUser("root", 0, 0), as_root=False) == (os.geteuid(), None)


def test_a_regular_file_of_the_job_user_is_read_from_its_offset(tmp_path: Path) -> None:
    f = tmp_path / "output.log"
    f.write_bytes(b"line 1\nline 2\n")
    assert h.read_job_file(f, os.geteuid(), 7, 3) == b"lin"
    assert h.read_job_file(f, None) == b"line 1\nline 2\n"
    with pytest.raises(FileNotFoundError):
        h.read_job_file(tmp_path / "exit_status", os.geteuid())


def test_links_fifos_and_files_of_another_owner_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("the master's")
    link = tmp_path / "output.log"
    link.symlink_to(secret)
    with pytest.raises(h.UntrustedFile, match="output.log is a symbolic link"):
        h.read_job_file(link, os.geteuid())
    fifo = tmp_path / "exit_status"
    os.mkfifo(fifo)  # opening it for reading would block the master's pass without O_NONBLOCK
    with pytest.raises(h.UntrustedFile, match="exit_status is not a regular file"):
        h.read_job_file(fifo, os.geteuid())
    with pytest.raises(h.UntrustedFile, match=f"secret belongs to uid {os.geteuid()}, not"):
        h.read_job_file(secret, os.geteuid() + 1)


def test_hand_over_grants_the_job_user_alone(tmp_path: Path) -> None:
    job_dir = tmp_path / "alloc"
    job_dir.mkdir(mode=0o700)
    spec = job_dir / "spec.json"
    spec.write_text("{}")
    spec.chmod(0o600)
    h.hand_over(job_dir, {spec: h.R}, uid=45678, master_uid=500)
    assert os.getxattr(spec, h.ACCESS_XATTR) == h.acl_xattr(h.owner_and(45678, 6, h.R))
    assert os.getxattr(job_dir, h.DEFAULT_XATTR) == h.acl_xattr(h.owner_and(500, 7, h.R | h.X))
    # group bits show the mask; others get nothing
    assert (spec.stat().st_mode & 0o777, job_dir.stat().st_mode & 0o777) == (0o640, 0o770)


def test_storage_without_acls_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_acls(*_args: object) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(h.os, "setxattr", no_acls)
    job_dir = tmp_path / "alloc"
    job_dir.mkdir()
    with pytest.raises(h.NoAclSupport, match=r"job_storage_root \(.*\) does not support POSIX"):
        h.hand_over(job_dir, {}, uid=45678, master_uid=500)


def test_a_root_master_gives_the_files_to_the_job_user(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("giving files away needs root (the test machine runs the suite as root)")
    for name, user, want in (
        ("linked", JobUser("alice", 45678, 45679), (45678, 45679)),
        # sudo to `user_name` (no link): that user's uid, its own group (unknown here: the uid)
        ("sudo", JobUser(), (45678, 45678)),
    ):
        job_dir = tmp_path / name
        job_dir.mkdir(mode=0o700)
        for f in ("spec.json", "job.sh"):
            (job_dir / f).write_text("")
        h.give(job_dir, user, 45678)
        for path in (job_dir, job_dir / "spec.json", job_dir / "job.sh"):
            assert (path.stat().st_uid, path.stat().st_gid) == want, path
