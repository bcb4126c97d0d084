"""The master-agent protocol: message types both sides import, and why allocations end.

Agents report an exit with a machine-readable `cause` next to the human `error` text, so the
master never has to recognise a cause by searching the text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class ExitCause(StrEnum):
    """Why an allocation ended other than by the trial's own exit code."""

    AGENT_SHUTDOWN = "agent_shutdown"  # the agent stopped its trials on purpose
    IMAGE_PULL_FAILED = "image_pull_failed"  # the container image cannot be pulled
    PREEMPTION_TIMEOUT = "preemption_timeout"  # ignored the preemption signal past the timeout
    AGENT_LOST = "agent_lost"  # the agent stopped polling
    INSTANCE_INTERRUPTED = "instance_interrupted"  # its spot/preemptible instance was taken back
    CONTAINER_GONE = "container_gone"  # the agent restarted without it
    KILLED_BEFORE_START = "killed_before_start"
    NEVER_FITS = "never_fits"  # the backend (Slurm) refused the request: no wait can help
    BACKEND_PREEMPTED = "backend_preempted"  # Slurm took the job back (preemption, time limit)
    # A Kubernetes pod of the gang stayed Unschedulable past the RM's pending_timeout.
    POD_UNSCHEDULABLE = "pod_unschedulable"
    # The backend did not take the job for a reason that passes (Slurm's controller or munge
    # did not answer sbatch): requeued, the trial's restarts untouched.
    BACKEND_UNAVAILABLE = "backend_unavailable"

    @property
    def message(self) -> str:
        return _MESSAGES[self]

    @property
    def retryable(self) -> bool:
        """False when no restart can help (the trial fails at once)."""
        return self not in (ExitCause.IMAGE_PULL_FAILED, ExitCause.NEVER_FITS)

    @property
    def trials_fault(self) -> bool:
        """False when the trial is requeued without spending one of its restarts."""
        return self not in (
            ExitCause.AGENT_SHUTDOWN,
            ExitCause.INSTANCE_INTERRUPTED,
            ExitCause.BACKEND_PREEMPTED,
            ExitCause.POD_UNSCHEDULABLE,
            ExitCause.BACKEND_UNAVAILABLE,
        )

    @classmethod
    def parse(cls, value: object) -> ExitCause | None:
        try:
            return cls(value) if isinstance(value, str) else None
        except ValueError:
            return None


_MESSAGES = {
    ExitCause.AGENT_SHUTDOWN: "killed because det-agent is shutting down",
    ExitCause.IMAGE_PULL_FAILED: "cannot pull the image",
    ExitCause.PREEMPTION_TIMEOUT: "killed: it ignored the preemption signal past the timeout",
    ExitCause.AGENT_LOST: "the agent was lost",
    ExitCause.INSTANCE_INTERRUPTED: "its spot/preemptible instance was interrupted",
    ExitCause.CONTAINER_GONE: "the agent no longer runs this allocation",
    ExitCause.KILLED_BEFORE_START: "killed before it started",
    ExitCause.NEVER_FITS: "can never fit",
    ExitCause.BACKEND_PREEMPTED: "Slurm took the job back (preemption or its time limit)",
    ExitCause.POD_UNSCHEDULABLE: "its Kubernetes pods could not be scheduled in time",
    ExitCause.BACKEND_UNAVAILABLE: "Slurm did not take the job (its controller did not answer)",
}


# -- messages ------------------------------------------------------------------------------------
#
# One poll carries everything (registration, heartbeat, reports, work): the agent POSTs a
# PollRequest to /api/v1/agents/{id}/poll and the master answers with a PollReply. `parse`
# validates a received JSON body and raises ProtocolError naming the bad field; `to_json` builds
# what is sent. Bump PROTOCOL_VERSION on any change a peer of the other version would misread.

PROTOCOL_VERSION = 3  # 3: StartSpec.user (who a task runs as); an older agent would ignore it


class ProtocolError(ValueError):
    """A message that does not follow the protocol; `path` names the offending field."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class ReportedState(StrEnum):
    """What an agent says about one of its allocations."""

    RUNNING = "RUNNING"  # accepted: downloading, starting or running (pid once it has one)
    EXITED = "EXITED"


INT32 = 2**31 - 1  # every integer the protocol carries lands in an INTEGER column


def _int(value: object, path: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{path} must be an integer", path)
    if not -INT32 - 1 <= value <= INT32:
        raise ProtocolError(f"{path} must fit in 32 bits, got {value}", path)
    return value


def _str(
    value: object, path: str, *, optional: bool = False, max_len: int | None = None
) -> str | None:
    """A string; at most `max_len` characters when given (the column an agent's report lands in)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ProtocolError(f"{path} must be a string", path)
    if max_len is not None and len(value) > max_len:
        raise ProtocolError(f"{path} must be at most {max_len} characters", path)
    return value


def _obj(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{path or 'the body'} must be a JSON object", path)
    return value


def _list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise ProtocolError(f"{path} must be a list", path)
    return value


@dataclass(frozen=True)
class SlotReport:
    index: int
    type: str = "cpu"  # "cpu" | "gpu"
    uuid: str | None = None
    name: str | None = None
    memory_mb: int | None = None
    stats: dict[str, Any] | None = None  # utilisation, memory, temperature ... (NVML or host)

    @classmethod
    def parse(cls, body: object, path: str) -> SlotReport:
        d = _obj(body, path)
        kind = d.get("type", "cpu")
        if kind not in ("cpu", "gpu"):
            raise ProtocolError("slot type must be 'cpu' or 'gpu'", f"{path}.type")
        stats = d.get("stats")
        return cls(
            index=_int(d.get("index"), f"{path}.index") or 0,
            type=kind,
            uuid=_str(d.get("uuid"), f"{path}.uuid", optional=True, max_len=128),
            name=_str(d.get("name"), f"{path}.name", optional=True, max_len=256),
            memory_mb=_int(d.get("memory_mb"), f"{path}.memory_mb", optional=True),
            stats=_obj(stats, f"{path}.stats") if stats else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _port(value: object, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise ProtocolError(f"{path} must be a TCP port from 1 to 65535", path)
    return value


@dataclass(frozen=True)
class AllocationReport:
    id: str
    state: ReportedState
    exit_code: int | None = None
    pid: int | None = None
    error: str | None = None
    cause: ExitCause | None = None
    # The port the task listens on for the master's proxy (a StartSpec with `proxy`): the
    # master reaches it at the agent's address (master/proxy/).
    proxy_port: int | None = None

    @classmethod
    def parse(cls, body: object, path: str) -> AllocationReport:
        d = _obj(body, path)
        try:
            state = ReportedState(d.get("state", ReportedState.RUNNING))
        except ValueError:
            raise ProtocolError("state must be RUNNING or EXITED", f"{path}.state") from None
        code = d.get("exit_code")
        return cls(
            id=_str(d.get("id"), f"{path}.id", max_len=64) or "",
            state=state,
            exit_code=code
            if isinstance(code, int) and not isinstance(code, bool) and abs(code) <= INT32
            else None,
            pid=_int(d.get("pid"), f"{path}.pid", optional=True),
            error=str(d["error"]) if d.get("error") else None,
            cause=ExitCause.parse(d.get("cause")),
            proxy_port=_port(d.get("proxy_port"), f"{path}.proxy_port"),
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "state": self.state.value,
            "exit_code": self.exit_code,
            "pid": self.pid,
            "error": self.error,
            "cause": self.cause.value if self.cause else None,
        }
        if self.proxy_port is not None:  # only a task served through the proxy has one
            body["proxy_port"] = self.proxy_port
        return body


class IsolationMode(StrEnum):
    """How an agent runs other users' tasks (agent/identity.py decides, docs/security.md)."""

    ISOLATED = "isolated"  # each user's tasks as their own identity, never the agent's
    OWN_USER = "own_user"  # cannot switch: only the tasks of the user linked to the agent's uid
    SHARED = "shared"  # cannot or may not switch, and the operator accepted it


@dataclass(frozen=True)
class TaskAcceptance:
    """Whose tasks an agent runs, sent in every poll so that the scheduler places a task only
    where it will run (the agent refuses the others: agent/identity.py's `plan`)."""

    mode: IsolationMode
    uid: int  # the agent's own Unix uid

    @property
    def only_uid(self) -> int | None:
        """None: anyone's tasks; else only tasks of users linked to this uid."""
        return self.uid if self.mode == IsolationMode.OWN_USER else None

    @classmethod
    def parse(cls, body: object, path: str) -> TaskAcceptance:
        d = _obj(body, path)
        mode = d.get("mode")
        if mode not in set(IsolationMode):
            names = ", ".join(m.value for m in IsolationMode)
            raise ProtocolError(f"{path}.mode must be one of {names}", f"{path}.mode")
        uid = _unix_id(d.get("uid"), f"{path}.uid")
        if uid is None:
            raise ProtocolError(f"{path}.uid is required", f"{path}.uid")
        return cls(IsolationMode(mode), uid)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "uid": self.uid}


@dataclass(frozen=True)
class PollRequest:
    resource_pool: str = "default"
    slots: tuple[SlotReport, ...] = ()
    allocations: tuple[AllocationReport, ...] = ()
    wait: float = 0.0  # long poll: hold the reply up to this many seconds while there is no work
    hostname: str | None = None
    runtime: str | None = None
    version: str | None = None
    # Whose tasks it runs; None from an agent that does not say (taken as anyone's).
    acceptance: TaskAcceptance | None = None
    protocol: int = PROTOCOL_VERSION

    @classmethod
    def parse(cls, body: object) -> PollRequest:
        d = _obj(body, "")
        protocol = d.get("protocol")
        if protocol != PROTOCOL_VERSION:
            spoken = "an older protocol" if protocol is None else f"protocol {protocol!r}"
            raise ProtocolError(
                f"this agent speaks {spoken}; this master speaks protocol {PROTOCOL_VERSION}: "
                "run a det-agent of the master's version",
                "protocol",
            )
        wait = d.get("wait", 0)
        return cls(
            resource_pool=_str(d.get("resource_pool") or "default", "resource_pool", max_len=128)
            or "default",
            slots=tuple(
                SlotReport.parse(s, f"slots[{i}]")
                for i, s in enumerate(_list(d.get("slots", []), "slots"))
            ),
            allocations=tuple(
                AllocationReport.parse(a, f"allocations[{i}]")
                for i, a in enumerate(_list(d.get("allocations", []), "allocations"))
            ),
            wait=float(wait) if isinstance(wait, int | float) and not isinstance(wait, bool) else 0,
            hostname=_str(d.get("hostname"), "hostname", optional=True, max_len=256),
            runtime=_str(d.get("runtime"), "runtime", optional=True, max_len=32),
            version=_str(d.get("version"), "version", optional=True, max_len=32),
            acceptance=None
            if d.get("acceptance") is None
            else TaskAcceptance.parse(d.get("acceptance"), "acceptance"),
            protocol=PROTOCOL_VERSION,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "resource_pool": self.resource_pool,
            "version": self.version,
            "runtime": self.runtime,
            "hostname": self.hostname,
            "acceptance": None if self.acceptance is None else self.acceptance.to_json(),
            "slots": [s.to_json() for s in self.slots],
            "allocations": [a.to_json() for a in self.allocations],
            "wait": self.wait,
        }


def _entrypoint(value: object, path: str) -> str | list[str]:
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        return list(value)
    return _str(value, path) or ""


MAX_UNIX_ID = 2**32 - 2  # (uid_t)-1 means "unchanged" to setuid(2)


def _unix_id(value: object, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_UNIX_ID:
        raise ProtocolError(f"{path} must be an integer from 0 to {MAX_UNIX_ID}", path)
    return value


@dataclass(frozen=True)
class TaskUser:
    """Whose task this is, and the Unix identity it runs as on an agent.

    `uid`/`gid` are the detlab user's linked agent user (`det user link-with-agent-user`, or the
    master's `agent_user_group` default); None lets the agent derive an identity of its own for
    this detlab user (agent/identity.py)."""

    user_id: int
    username: str
    uid: int | None = None
    gid: int | None = None
    unix_user: str | None = None
    unix_group: str | None = None

    @classmethod
    def parse(cls, body: object, path: str) -> TaskUser:
        d = _obj(body, path)
        return cls(
            user_id=_int(d.get("user_id"), f"{path}.user_id") or 0,
            username=_str(d.get("username"), f"{path}.username", max_len=128) or "",
            uid=_unix_id(d.get("uid"), f"{path}.uid"),
            gid=_unix_id(d.get("gid"), f"{path}.gid"),
            unix_user=_str(d.get("unix_user"), f"{path}.unix_user", optional=True, max_len=64),
            unix_group=_str(d.get("unix_group"), f"{path}.unix_group", optional=True, max_len=64),
        )


@dataclass(frozen=True)
class StartSpec:
    """Everything an agent needs to start its container of an allocation."""

    allocation_id: str
    trial_id: int
    experiment_id: int
    entrypoint: str | list[str]  # a command line, or an argv (run without a shell)
    slot_indexes: tuple[int, ...]
    env: dict[str, str]
    environment: dict[str, Any] = field(default_factory=dict)  # the config's `environment`
    bind_mounts: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_storage: dict[str, Any] = field(default_factory=dict)
    model_def_url: str | None = None
    model_def_sha256: str | None = None
    user: TaskUser | None = None  # None: the agent's own (tests and unmanaged tools only)
    # The task serves HTTP through the master's proxy (a notebook, a shell): the agent picks a
    # free port, hands it over as DET_TASK_PORT and reports it (`AllocationReport.proxy_port`).
    proxy: bool = False

    @classmethod
    def parse(cls, body: object, path: str = "spec") -> StartSpec:
        d = _obj(body, path)
        env = _obj(d.get("env", {}), f"{path}.env")
        user = d.get("user")
        return cls(
            allocation_id=_str(d.get("allocation_id"), f"{path}.allocation_id") or "",
            trial_id=_int(d.get("trial_id"), f"{path}.trial_id") or 0,
            experiment_id=_int(d.get("experiment_id"), f"{path}.experiment_id") or 0,
            entrypoint=_entrypoint(d.get("entrypoint"), f"{path}.entrypoint"),
            slot_indexes=tuple(
                _int(s, f"{path}.slot_indexes[{i}]") or 0
                for i, s in enumerate(_list(d.get("slot_indexes", []), f"{path}.slot_indexes"))
            ),
            env={str(k): str(v) for k, v in env.items()},
            environment=_obj(d.get("environment") or {}, f"{path}.environment"),
            bind_mounts=_list(d.get("bind_mounts") or [], f"{path}.bind_mounts"),
            checkpoint_storage=_obj(
                d.get("checkpoint_storage") or {}, f"{path}.checkpoint_storage"
            ),
            model_def_url=_str(d.get("model_def_url"), f"{path}.model_def_url", optional=True),
            model_def_sha256=_str(
                d.get("model_def_sha256"), f"{path}.model_def_sha256", optional=True
            ),
            user=TaskUser.parse(user, f"{path}.user") if user is not None else None,
            proxy=d.get("proxy") is True,
        )

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["slot_indexes"] = list(self.slot_indexes)
        return body


class ActionType(StrEnum):
    START = "start"
    KILL = "kill"
    DELETE_CHECKPOINT = "delete_checkpoint"  # storage only agents reach (checkpoint GC)


@dataclass(frozen=True)
class Action:
    type: ActionType
    allocation_id: str = ""  # START and KILL
    spec: StartSpec | None = None  # START
    checkpoint_uuid: str = ""  # DELETE_CHECKPOINT
    storage: dict[str, Any] | None = None  # DELETE_CHECKPOINT: the checkpoint_storage config

    @classmethod
    def start(cls, spec: StartSpec) -> Action:
        return cls(ActionType.START, spec.allocation_id, spec)

    @classmethod
    def kill(cls, allocation_id: str) -> Action:
        return cls(ActionType.KILL, allocation_id)

    @classmethod
    def delete_checkpoint(cls, uuid: str, storage: dict[str, Any]) -> Action:
        return cls(ActionType.DELETE_CHECKPOINT, checkpoint_uuid=uuid, storage=storage)

    @classmethod
    def parse(cls, body: object, path: str) -> Action:
        d = _obj(body, path)
        try:
            kind = ActionType(d.get("type", ""))
        except ValueError:
            raise ProtocolError(f"unknown action {d.get('type')!r}", f"{path}.type") from None
        if kind == ActionType.START:
            spec = StartSpec.parse(d.get("spec"), f"{path}.spec")
            return cls(kind, spec.allocation_id, spec)
        if kind == ActionType.DELETE_CHECKPOINT:
            return cls.delete_checkpoint(
                _str(d.get("uuid"), f"{path}.uuid") or "", _obj(d.get("storage"), f"{path}.storage")
            )
        return cls(kind, _str(d.get("allocation_id"), f"{path}.allocation_id") or "")

    def to_json(self) -> dict[str, Any]:
        if self.type == ActionType.START and self.spec is not None:
            return {"type": self.type.value, "spec": self.spec.to_json()}
        if self.type == ActionType.DELETE_CHECKPOINT:
            return {"type": self.type.value, "uuid": self.checkpoint_uuid, "storage": self.storage}
        return {"type": self.type.value, "allocation_id": self.allocation_id}


@dataclass(frozen=True)
class PollReply:
    actions: tuple[Action, ...] = ()
    poll_interval: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"actions": [a.to_json() for a in self.actions], "poll_interval": self.poll_interval}

    @classmethod
    def parse(cls, body: object) -> tuple[PollReply, list[ProtocolError]]:
        """The reply's valid actions, and an error for each action that is not (never fatal)."""
        d = _obj(body, "")
        actions, errors = [], []
        for i, a in enumerate(_list(d.get("actions") or [], "actions")):
            try:
                actions.append(Action.parse(a, f"actions[{i}]"))
            except ProtocolError as e:
                errors.append(e)
        interval = d.get("poll_interval")
        return cls(
            tuple(actions),
            float(interval) if isinstance(interval, int | float) and interval > 0 else 0.0,
        ), errors
