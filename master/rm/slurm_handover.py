"""Handing a Slurm job's directory to the Unix user the job runs as, and reading back from it.

A master running as root `chown`s the job directory (0700) and `spec.json` (0600: the session
token) to the job's user. A master running as an unprivileged service user with
`sudo_authorized` cannot give files away, and it must still read the `output.log` and
`exit_status` the job writes there. It keeps the directory its own and grants the job's user
alone access through POSIX ACLs, which an owner may set without any privilege:

- the job directory: the job's user `rwx` (Slurm writes its output there as that user, the job
  its status and work directory); group and others nothing, so no other Unix user can list it
  or reach the token;
- a default ACL on it: whatever the job's user creates there is readable by the master;
- `spec.json` and `job.sh`: readable by the job's user (sbatch reads the script, the launcher
  the spec), by nobody else.

Why not the alternatives: `sudo chown` (Determined's launcher) needs a sudo rule as root over
arbitrary paths; a group shared by the master and every job user would let one job user read
another's output; passing the spec through `sbatch`'s stdin still leaves the output file, which
the master must read. The ACL needs no sudo rule beyond `sbatch`/`scancel` as the job's users.

The job's user can write in its directory, so what the master reads there is hostile input: a
symbolic link to a file only the master may read would ship that file into the user's task
logs, a FIFO would block the master. `read_job_file` opens without following links and without
blocking, and reads only a regular file owned by the job's user.

The ACL encoding (`acl_xattr`) and the choice of identity (`job_uid`) are pure; `hand_over`
and `read_job_file` do the I/O.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from master.rm import slurm_cli as cli
from master.rm.slurm_config import SlurmConfig

# Linux's POSIX ACL extended attributes (include/uapi/linux/posix_acl_xattr.h).
ACCESS_XATTR = "system.posix_acl_access"
DEFAULT_XATTR = "system.posix_acl_default"
_VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_UNDEFINED_ID = 0xFFFFFFFF
R, W, X = 4, 2, 1


@dataclass(frozen=True)
class AclEntry:
    tag: int
    perm: int
    id: int = _UNDEFINED_ID


def acl_xattr(entries: list[AclEntry]) -> bytes:
    """The extended attribute's value: a version header, then the entries sorted by tag and id
    (the kernel refuses them in another order)."""
    out = struct.pack("<I", _VERSION)
    for e in sorted(entries, key=lambda e: (e.tag, e.id)):
        out += struct.pack("<HHI", e.tag, e.perm, e.id)
    return out


def owner_and(uid: int, owner: int, named: int) -> list[AclEntry]:
    """The owner's permissions, `named` for user `uid`, nothing for group and others (the mask,
    the most a named entry gets, is `named`)."""
    return [
        AclEntry(USER_OBJ, owner),
        AclEntry(USER, named, uid),
        AclEntry(GROUP_OBJ, 0),
        AclEntry(MASK, named),
        AclEntry(OTHER, 0),
    ]


def job_uid(
    sudo_authorized: bool,
    as_root: bool,
    linked_uid: int | None,
    sudo_user: str | None,
    my_uid: int,
    lookup: Callable[[str], int],
) -> int:
    """Whom the job runs as (master/rm/slurm_cli.sbatch_argv decides it the same way): with
    sudo, the user `sudo -u` names (the linked user, or `user_name`), by its uid on this host,
    which is what sudo runs as; as root without sudo, the linked uid (`--uid`); else the
    master's own user. `lookup` maps a user name to its uid (a KeyError: unknown)."""
    if sudo_authorized and sudo_user:
        return lookup(sudo_user)
    if as_root and linked_uid is not None:
        return linked_uid
    return my_uid


def job_identity(cfg: SlurmConfig, user: cli.JobUser, as_root: bool) -> tuple[int, str | None]:
    """The job's uid, and the user `sudo -u` runs its Slurm commands as (None: no sudo). A
    KeyError names a sudo user this host does not know."""
    prefix = cli.as_user(cfg, user.name)
    sudo_user = prefix[-1] if prefix else None

    def lookup(name: str) -> int:
        try:
            return pwd.getpwnam(name).pw_uid
        except KeyError:
            raise KeyError(
                f"the Slurm job's Unix user {name} is unknown on the master's host"
            ) from None

    uid = job_uid(cfg.sudo_authorized, as_root, user.uid, sudo_user, os.geteuid(), lookup)
    return uid, sudo_user


def give(job_dir: Path, user: cli.JobUser, uid: int) -> None:
    """Make the job directory (where Slurm writes the output and the job its status), the spec
    with the session token and the batch script the job's user's alone: a root master gives
    them away; a master that is not root keeps them and grants that user access (ACLs)."""
    files = (job_dir, job_dir / cli.SPEC_FILE, job_dir / cli.SCRIPT_FILE)
    if os.geteuid() == 0:
        if uid != 0:  # the linked user's, or (sudo to `user_name`) that user's
            for path in files:
                os.chown(path, uid, _gid_of(user, uid))
    elif uid != os.geteuid():
        hand_over(job_dir, {files[1]: R, files[2]: R | X}, uid, os.geteuid())


def _gid_of(user: cli.JobUser, uid: int) -> int:
    """The group the root master gives the files to: the link's, else the user's own."""
    if user.gid is not None and user.uid == uid:
        return user.gid
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid


class NoAclSupport(OSError):
    pass


def hand_over(job_dir: Path, files: dict[Path, int], uid: int, master_uid: int) -> None:
    """Give user `uid` what it needs of a job directory the master keeps (see the module's
    doc): `files` maps each master-written file to the user's permission bits on it."""
    try:
        for path, perm in files.items():
            owner = stat.S_IMODE(path.stat().st_mode) >> 6
            os.setxattr(path, ACCESS_XATTR, acl_xattr(owner_and(uid, owner, perm)))
        os.setxattr(job_dir, ACCESS_XATTR, acl_xattr(owner_and(uid, R | W | X, R | W | X)))
        # What the job creates: the master may read it (and enter its directories).
        os.setxattr(job_dir, DEFAULT_XATTR, acl_xattr(owner_and(master_uid, R | W | X, R | X)))
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.ENOTSUP):
            raise NoAclSupport(
                e.errno,
                f"job_storage_root ({job_dir.parent}) does not support POSIX ACLs, which a "
                f"master that is not root needs to hand the job directory to uid {uid} "
                "(mount it with ACLs, or run the master as root)",
            ) from e
        raise


def storage_problem(root: Path) -> str | None:
    """Why a master that is not root cannot hand job directories over in `root` (None: it can):
    probed with a directory of its own and an ACL on it, removed after. Asked on every
    scheduling pass while it fails, so fixing the storage needs no restart."""
    me = os.geteuid()
    try:
        probe = Path(tempfile.mkdtemp(prefix=".detlab-probe-", dir=root))
    except OSError as e:
        try:
            name = pwd.getpwuid(me).pw_name
        except KeyError:
            name = str(me)
        return (
            f"job_storage_root {root} is not usable by the master's user {name}: {e.strerror} "
            "(it must exist and be the master's, mode 0711)"
        )
    try:
        hand_over(probe, {}, me, me)
    except NoAclSupport as e:
        return e.strerror
    except OSError as e:
        return f"job_storage_root {root}: cannot set an ACL: {e.strerror}"
    finally:
        probe.rmdir()
    return None


class UntrustedFile(Exception):
    """A job file the master will not read (what it is instead is in the message)."""


def read_job_file(path: Path, owner: int | None, offset: int = 0, limit: int = -1) -> bytes:
    """Up to `limit` bytes from `offset` of a file the job wrote. FileNotFoundError while it is
    not there; UntrustedFile for a link, anything but a regular file, or one the job's user
    (`owner`; None: not known, an allocation of an older master) does not own."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UntrustedFile(f"{path.name} is a symbolic link") from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFile(f"{path.name} is not a regular file")
        if owner is not None and st.st_uid != owner:
            raise UntrustedFile(f"{path.name} belongs to uid {st.st_uid}, not the job's {owner}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            f.seek(offset)
            return f.read(limit)
    finally:
        os.close(fd)
