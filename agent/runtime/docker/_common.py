"""Constants, options and small helpers shared by the docker runtime's modules."""

from __future__ import annotations

import inspect
import io
import logging
import posixpath
import re
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.runtime import AGENT_LINE_PREFIX
from detlab.protocol import ExitCause

log = logging.getLogger("agent.runtime.docker")

LABEL_PREFIX = "ai.detlab"
L_MANAGED = f"{LABEL_PREFIX}.managed-by"
L_AGENT = f"{LABEL_PREFIX}.agent"
L_ALLOCATION = f"{LABEL_PREFIX}.allocation"
L_TRIAL = f"{LABEL_PREFIX}.trial"
L_EXPERIMENT = f"{LABEL_PREFIX}.experiment"
# A notebook's, shell's or TensorBoard's port (StartSpec.proxy): a restarted agent reads it back
# and reports it again, or the master's proxy would lose its way to a task that kept running.
L_PROXY_PORT = f"{LABEL_PREFIX}.proxy-port"

WORKDIR = "/run/determined/workdir"
LIB_DIR = "/run/determined/lib"
STARTUP_HOOK = "startup-hook.sh"

# Sources startup-hook.sh when the model directory has one, then execs the entrypoint ("$@").
ENTRY_SCRIPT = (
    f"if [ -f ./{STARTUP_HOOK} ]; then "
    f'. ./{STARTUP_HOOK} || {{ rc=$?; echo "{AGENT_LINE_PREFIX}{STARTUP_HOOK} failed with exit '
    'code $rc" >&2; exit $rc; }; fi; exec "$@"'
)


class DockerUnavailable(Exception):
    """The Docker engine (or the SDK) cannot be used; says why."""


@dataclass
class DockerOptions:
    """The docker runtime's settings (det-agent flags)."""

    container_master_url: str | None = None  # default: derived from the agent's master URL
    network: str = "host"  # host | bridge | a user-defined network
    keep_failed: int = 3  # failed containers kept for debugging (the newest N)
    memory_limit: str | None = None  # e.g. "32g"; no swap beyond it (so the limit is real)
    shm_size: str | None = "4g"  # PyTorch data loaders need more than Docker's 64 MB
    use_init: bool = True  # run the engine's init as PID 1 (signals reach the trial)
    pull_timeout: float = 600.0
    docker_timeout: float = 60.0


@dataclass
class _Container:
    id: str
    name: str
    image: str
    stop_evt: threading.Event = field(default_factory=threading.Event)
    exited: threading.Event = field(default_factory=threading.Event)


class _StartError(Exception):
    def __init__(self, message: str, cause: ExitCause | None = None) -> None:
        super().__init__(message)
        self.cause = cause


def _explain(e: BaseException) -> str:
    explanation = getattr(e, "explanation", None)
    if explanation:
        return str(explanation)
    return str(e) or type(e).__name__


def _checked_model_def(path: Path | None) -> bytes | None:
    """The model definition's bytes, after checking that nothing in it escapes its directory."""
    if path is None:
        return None
    data = path.read_bytes()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for member in tar:
                tarfile.data_filter(member, WORKDIR)
    except (tarfile.TarError, EOFError) as e:
        raise ValueError(f"the model definition is refused: {e}") from e
    return data


def owned_workdir_tar(model_tar: bytes | None, uid: int, gid: int) -> bytes:
    """What goes into the container for a task run as uid:gid, to be put at WORKDIR's parent:
    the work dir itself, its own and 0700, with the model definition (if any) in it, its own.

    Rooted at the parent because Docker creates the container's working dir (root's, 0755)
    when it creates the container, and a "." entry put into an existing directory leaves its
    owner and mode alone: the task could not write to its own work dir (JupyterLab fails to
    make its runtime dir under HOME there)."""
    top_name = posixpath.basename(WORKDIR)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as dst:
        top = tarfile.TarInfo(top_name)
        top.type, top.mode, top.uid, top.gid = tarfile.DIRTYPE, 0o700, uid, gid
        dst.addfile(top)
        if model_tar is not None:
            with tarfile.open(fileobj=io.BytesIO(model_tar), mode="r:*") as src:
                for member in src:
                    name = posixpath.normpath(member.name)
                    if name == ".":
                        continue
                    member.name = f"{top_name}/{name}"
                    if member.islnk():  # a hard link names its target from the archive's root
                        member.linkname = f"{top_name}/{posixpath.normpath(member.linkname)}"
                    member.uid, member.gid, member.uname, member.gname = uid, gid, "", ""
                    data = src.extractfile(member) if member.isfile() else None
                    dst.addfile(member, data)
    return out.getvalue()


def _accepts_timestamp(sink: Any) -> bool:
    """Whether the log sink takes the line's timestamp (LogShipper.add does)."""
    try:
        params = inspect.signature(sink).parameters
    except (TypeError, ValueError):
        return False
    return "timestamp" in params or any(
        p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values()
    )


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text).strip("._-") or "x"


def recovered_proxy_port(labels: dict[str, str], env: list[str] | None) -> int | None:
    """Pure: the port a re-attached container serves the master's proxy on: its label, else
    (a container created by an agent before the label existed) the DET_TASK_PORT the agent put
    last in its environment; None for a container without one (a trial) or a bad value."""
    raw = labels.get(L_PROXY_PORT)
    if raw is None:
        raw = next(
            (e.partition("=")[2] for e in reversed(env or []) if e.startswith("DET_TASK_PORT=")),
            None,
        )
    try:
        port = int(raw) if raw is not None else None
    except ValueError:
        return None
    return port if port is not None and 0 < port < 65536 else None
