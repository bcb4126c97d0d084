"""SQLAlchemy 2.0 models: the master's whole durable state.

Everything an agent or a trial knows can be rebuilt from these rows.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from detlab.expconf import ExperimentConfig, load_stored
from detlab.protocol import ExitCause
from master.db import BigIntPK, utcnow
from master.model_base import TZ, JSONType, _DbModel
from master.states import (
    AgentState,
    AllocationState,
    CheckpointState,
    InstanceState,
    State,
    TaskState,
    TaskType,
)


def _state_column(enum: type[StrEnum], length: int) -> Enum:
    """An enum column stored as its value in plain text (no database enum type to migrate)."""
    return Enum(
        enum,
        native_enum=False,
        create_constraint=False,
        length=length,
        values_callable=lambda e: [m.value for m in e],
        validate_strings=True,
    )


class User(_DbModel):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(128), unique=True)
    password_hash: Mapped[str] = mapped_column(String(256))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    # The Unix user this user's trials run as on agents (`det user link-with-agent-user`);
    # unlinked, the master's `agent_user_group` default, else an identity the agent derives.
    agent_uid: Mapped[int | None] = mapped_column(BigInteger)
    agent_gid: Mapped[int | None] = mapped_column(BigInteger)
    agent_user: Mapped[str | None] = mapped_column(String(64))
    agent_group: Mapped[str | None] = mapped_column(String(64))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "username": self.username,
            "admin": self.admin,
            "active": self.active,
        }
        if self.agent_uid is not None:
            out["agent_user_group"] = {
                "agent_uid": self.agent_uid,
                "agent_gid": self.agent_gid,
                "agent_user": self.agent_user,
                "agent_group": self.agent_group,
            }
        return out


class AgentCredential(_DbModel):
    """An agent's own credential, bound to its id (issued for the cluster's join token once).

    Only its sha256 is stored; the agent keeps the credential in a 0600 file of its data dir."""

    __tablename__ = "agent_credentials"
    agent_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    credential_hash: Mapped[str] = mapped_column(String(64), unique=True)
    issued_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)


class AuthToken(_DbModel):
    """A bearer token: a user's login session, or one allocation's session token."""

    __tablename__ = "auth_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    allocation_id: Mapped[str | None] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(TZ)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    # "api": a bearer token; "web": a browser's session id, never accepted as a bearer token
    kind: Mapped[str] = mapped_column(String(8), default="api", server_default="api")


class Agent(_DbModel):
    __tablename__ = "agents"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    state: Mapped[AgentState] = mapped_column(
        _state_column(AgentState, 16), default=AgentState.ACTIVE
    )
    resource_pool: Mapped[str] = mapped_column(String(128), default="default")
    hostname: Mapped[str | None] = mapped_column(String(256))
    runtime: Mapped[str | None] = mapped_column(String(32))
    version: Mapped[str | None] = mapped_column(String(32))
    registered_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    # Latest per-slot stats ({slot index: {...}}), written with the heartbeat in one UPDATE.
    slot_stats: Mapped[dict | None] = mapped_column(JSONType)
    # The address the master sees the agent's polls from (a trial's container_addrs).
    address: Mapped[str | None] = mapped_column(String(256))
    # Whose tasks it runs (detlab.protocol.TaskAcceptance), from its polls: its isolation mode
    # and its own Unix uid. NULL: it did not say (taken as anyone's tasks).
    isolation: Mapped[str | None] = mapped_column(String(16))
    unix_uid: Mapped[int | None] = mapped_column(BigInteger)
    slots: Mapped[list[Slot]] = relationship(
        back_populates="agent", order_by="Slot.index", cascade="all, delete-orphan"
    )


class Slot(_DbModel):
    __tablename__ = "slots"
    __table_args__ = (UniqueConstraint("agent_id", "index", name="uq_slots_agent_index"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(8))
    uuid: Mapped[str | None] = mapped_column(String(128))
    name: Mapped[str | None] = mapped_column(String(256))
    memory_mb: Mapped[int | None] = mapped_column(Integer)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    allocation_id: Mapped[str | None] = mapped_column(
        ForeignKey("allocations.id", ondelete="SET NULL"), index=True
    )
    stats: Mapped[dict | None] = mapped_column(JSONType)
    agent: Mapped[Agent] = relationship(back_populates="slots")


class Experiment(_DbModel):
    __tablename__ = "experiments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(512))
    description: Mapped[str | None] = mapped_column(Text)
    state: Mapped[State] = mapped_column(_state_column(State, 32), index=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    config: Mapped[dict] = mapped_column(JSONType)
    original_config: Mapped[str] = mapped_column(Text)
    # The model definition's bytes live in `model_def_chunks`
    # (master/services/experiment/model_defs.py): no experiment query ever loads them. Both are
    # None when it has none.
    model_def_sha256: Mapped[str | None] = mapped_column(String(64))
    model_def_size: Mapped[int | None] = mapped_column(BigInteger)
    searcher_state: Mapped[dict | None] = mapped_column(JSONType)
    seed: Mapped[int] = mapped_column(BigInteger)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    resource_pool: Mapped[str] = mapped_column(String(128), default="default")
    priority: Mapped[int] = mapped_column(Integer, default=42)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    # FIFO key within a priority; set by hand when a job is moved ahead of/behind another.
    queue_order: Mapped[float | None] = mapped_column(Float)
    best_trial_id: Mapped[int | None] = mapped_column(Integer)
    best_validation: Mapped[float | None] = mapped_column(Float)
    labels: Mapped[list | None] = mapped_column(JSONType)
    # Archived experiments are left out of default listings (Determined's `det e archive`).
    archived: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(TZ)
    owner: Mapped[User] = relationship()
    trials: Mapped[list[Trial]] = relationship(
        back_populates="experiment", order_by="Trial.id", cascade="all, delete-orphan"
    )

    @property
    def conf(self) -> ExperimentConfig:
        """`config` typed (detlab.expconf), built once per stored value: read this, never
        `config.get(...)`, so no default is restated outside the schema."""
        cached = self.__dict__.get("_conf")
        if cached is None or cached[0] is not self.config:
            cached = (self.config, load_stored(self.config))
            self.__dict__["_conf"] = cached
        return cached[1]

    @conf.setter
    def conf(self, value: ExperimentConfig) -> None:
        self.config = value.to_json()  # reassigned, so the JSON column sees the change


class Trial(_DbModel):
    __tablename__ = "trials"
    __table_args__ = (UniqueConstraint("experiment_id", "request_id", name="uq_trials_request"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), index=True
    )
    request_id: Mapped[str] = mapped_column(String(64))
    state: Mapped[State] = mapped_column(_state_column(State, 32), index=True)
    hparams: Mapped[dict] = mapped_column(JSONType)
    seed: Mapped[int] = mapped_column(BigInteger)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    steps_completed: Mapped[int] = mapped_column(BigInteger, default=0)
    # The searcher's current ask: train to `searcher_target` (0 = no operation yet).
    searcher_target: Mapped[int] = mapped_column(BigInteger, default=0)
    searcher_completed: Mapped[int] = mapped_column(BigInteger, default=0)
    # The searcher closed the trial: once its current operation is done it exits.
    closing: Mapped[bool] = mapped_column(Boolean, default=False)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    best_validation: Mapped[float | None] = mapped_column(Float)
    latest_validation: Mapped[dict | None] = mapped_column(JSONType)
    latest_checkpoint: Mapped[str | None] = mapped_column(String(64))
    exit_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(TZ)
    experiment: Mapped[Experiment] = relationship(back_populates="trials")


class Task(_DbModel):
    """Anything the cluster runs (Determined's task): a trial, a command, later a notebook...

    The scheduler schedules tasks' requests; allocations belong to tasks. A trial's task id is
    `<experiment id>.<request id>` and a command's a UUID, as in Determined. What a command runs
    lives in `spec`; a trial's task points at the trial, whose searcher and metrics sit on top.
    """

    __tablename__ = "tasks"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    type: Mapped[TaskType] = mapped_column(_state_column(TaskType, 16), index=True)
    state: Mapped[TaskState] = mapped_column(_state_column(TaskState, 16), index=True)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    trial_id: Mapped[int | None] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), unique=True
    )
    name: Mapped[str] = mapped_column(String(256), default="")
    # A command's request: pool, slots and priority (None for a trial's task: its experiment's
    # are the one source), and whether it may be preempted (a trial always may).
    resource_pool: Mapped[str | None] = mapped_column(String(128))
    slots: Mapped[int | None] = mapped_column(Integer)
    priority: Mapped[int | None] = mapped_column(Integer)
    preemptible: Mapped[bool] = mapped_column(Boolean, default=False)
    # A command's entrypoint and environment; None for a trial's task.
    spec: Mapped[dict | None] = mapped_column(JSONType)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    exit_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(TZ)
    # A command's, notebook's or shell's `--context` (.tar.gz): its bytes live in
    # `task_context_chunks` (master/services/task/task_context.py); None: it has none.
    context_sha256: Mapped[str | None] = mapped_column(String(64))
    context_size: Mapped[int | None] = mapped_column(BigInteger)


class Allocation(_DbModel):
    """One attempt to run a task: a set of slots and the process(es) on them."""

    __tablename__ = "allocations"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    # The trial of a trial's task (denormalised from the task, which never changes it); None for
    # every other task type.
    trial_id: Mapped[int | None] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), index=True
    )
    agent_id: Mapped[str | None] = mapped_column(String(128), index=True)
    state: Mapped[AllocationState] = mapped_column(_state_column(AllocationState, 16), index=True)
    slot_indexes: Mapped[list] = mapped_column(JSONType, default=list)
    # One container (process) per agent: {agent_id: {"rank", "slots", "started_at", "exited",
    # "exit_code", "error", "kill"}}; a trial whose slots span agents has several. A container's
    # state is derived from these facts (`master.states.container_state`), never stored.
    containers: Mapped[dict | None] = mapped_column(JSONType)
    preempt_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    preempt_requested_at: Mapped[datetime | None] = mapped_column(TZ)
    kill_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # The trial's process was last answered "no work" by the searcher-operation endpoint: it
    # exits 0 after that, and its exit must not swallow a promotion made in the meantime.
    out_of_work: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    exit_code: Mapped[int | None] = mapped_column(Integer)
    exit_reason: Mapped[str | None] = mapped_column(Text)
    # Why it ended when not by the trial's own exit code (the agent's report, or the master's).
    exit_cause: Mapped[ExitCause | None] = mapped_column(_state_column(ExitCause, 32))
    created_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(TZ)
    ended_at: Mapped[datetime | None] = mapped_column(TZ)
    trial: Mapped[Trial | None] = relationship()
    task: Mapped[Task] = relationship()


class Metric(_DbModel):
    __tablename__ = "metrics"
    __table_args__ = (
        Index("ix_metrics_trial_group_steps", "trial_id", "group", "steps_completed"),
    )
    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    group: Mapped[str] = mapped_column(String(32))
    steps_completed: Mapped[int] = mapped_column(BigInteger)
    metrics: Mapped[dict] = mapped_column(JSONType)
    reported_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    # Reported past the checkpoint a later run of the trial resumed from, so re-done by it: kept
    # for audit, hidden from series, best metrics and the searcher
    # (master/services/trial/supersede.py).
    superseded: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class ModelDefChunk(_DbModel):
    """One MiB of an experiment's model definition (.tar.gz), so it streams both ways."""

    __tablename__ = "model_def_chunks"
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class TaskContextChunk(_DbModel):
    """One MiB of a task's context (.tar.gz), stored and served like a model definition."""

    __tablename__ = "task_context_chunks"
    task_id: Mapped[str] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class MetricBatch(_DbModel):
    """A stored batch of metric reports: a retried batch (lost reply) is recognised by its id."""

    __tablename__ = "metric_batches"
    trial_id: Mapped[int] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True
    )
    batch_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    stored_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)


class Checkpoint(_DbModel):
    __tablename__ = "checkpoints"
    uuid: Mapped[str] = mapped_column(String(64), primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    experiment_id: Mapped[int] = mapped_column(Integer, index=True)
    allocation_id: Mapped[str | None] = mapped_column(String(64))
    steps_completed: Mapped[int] = mapped_column(BigInteger)
    metadata_: Mapped[dict] = mapped_column("metadata", JSONType, default=dict)
    resources: Mapped[dict] = mapped_column(JSONType, default=dict)
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    state: Mapped[CheckpointState] = mapped_column(
        _state_column(CheckpointState, 16), default=CheckpointState.ACTIVE
    )
    storage: Mapped[dict] = mapped_column(JSONType, default=dict)
    reported_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    # Deletion (master/ckpt/states.py is the one writer): why the state changed, when, retries.
    state_reason: Mapped[str | None] = mapped_column(Text)
    state_changed_at: Mapped[datetime | None] = mapped_column(TZ)
    delete_attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_delete_at: Mapped[datetime | None] = mapped_column(TZ)


class TaskLog(_DbModel):
    """One line of a task's output; `id` is the sequence number clients follow with `?after=`.

    A trial's lines are found by `trial_id` (as before tasks); other tasks' by `task_id`.
    """

    __tablename__ = "task_logs"
    __table_args__ = (
        Index("ix_task_logs_trial_id_id", "trial_id", "id"),
        Index("ix_task_logs_task_id_id", "task_id", "id"),
    )
    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    trial_id: Mapped[int | None] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    allocation_id: Mapped[str | None] = mapped_column(String(64))
    agent_id: Mapped[str | None] = mapped_column(String(128))
    timestamp: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    stream: Mapped[str] = mapped_column(String(8))
    line: Mapped[str] = mapped_column(Text)


class StateChange(_DbModel):
    """Why each entity changed state: written by `master.services.transitions` alone."""

    __tablename__ = "state_changes"
    __table_args__ = (Index("ix_state_changes_entity", "entity", "entity_id", "id"),)
    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    entity: Mapped[str] = mapped_column(String(16))
    entity_id: Mapped[str] = mapped_column(String(128))
    from_state: Mapped[str | None] = mapped_column(String(32))
    to_state: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(TZ, default=utcnow)

    def to_json(self) -> dict[str, Any]:
        from master.db import iso

        return {
            "entity": self.entity,
            "id": self.entity_id,
            "from": self.from_state,
            "to": self.to_state,
            "reason": self.reason,
            "at": iso(self.at),
        }


class ConfigTemplate(_DbModel):
    """A named experiment-config fragment merged under configs at submit time (templates)."""

    __tablename__ = "config_templates"
    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    config: Mapped[dict] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    # Others read and use a template; only its owner or an admin changes or removes it.
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    owner: Mapped[User | None] = relationship(lazy="joined")


class ProvisionerPool(_DbModel):
    """A resource pool with a cloud provider: its tag, and the last launch error (with backoff)."""

    __tablename__ = "provisioner_pools"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    # The tag/label value that marks this master's instances when the config names none.
    cluster_id: Mapped[str] = mapped_column(String(64))
    last_error: Mapped[str | None] = mapped_column(Text)
    last_error_at: Mapped[datetime | None] = mapped_column(TZ)
    launch_failures: Mapped[int] = mapped_column(Integer, default=0)
    backoff_until: Mapped[datetime | None] = mapped_column(TZ)


class Instance(_DbModel):
    """A cloud instance launched for a pool (master/provisioner); kept for history and display.

    The cloud is the source of truth for what exists; this row carries what the cloud does not:
    the join token's hash, when its agent connected and last ran something, and errors.
    """

    __tablename__ = "instances"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the launch id (a tag)
    pool: Mapped[str] = mapped_column(String(128), index=True)
    provider: Mapped[str] = mapped_column(String(8))
    # The cloud's id (EC2 instance id, GCE instance name): also the agent's id.
    cloud_id: Mapped[str | None] = mapped_column(String(128), unique=True)
    state: Mapped[InstanceState] = mapped_column(_state_column(InstanceState, 16), index=True)
    state_reason: Mapped[str | None] = mapped_column(Text)
    instance_type: Mapped[str] = mapped_column(String(128))
    slots: Mapped[int] = mapped_column(Integer, default=1)
    spot: Mapped[bool] = mapped_column(Boolean, default=False)
    launched_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    connected_at: Mapped[datetime | None] = mapped_column(TZ)
    last_busy_at: Mapped[datetime | None] = mapped_column(TZ)
    interrupted_at: Mapped[datetime | None] = mapped_column(TZ)
    terminated_at: Mapped[datetime | None] = mapped_column(TZ)
    # SHA-256 of the instance's join token; valid only while the instance is live.
    join_token_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    last_error: Mapped[str | None] = mapped_column(Text)


# The model registry's tables live in their own module (this one stays readable); importing
# them here registers them with the same metadata and keeps `from master.models import Model`.
from master.models_registry import Model as Model  # noqa: E402
from master.models_registry import ModelAlias as ModelAlias  # noqa: E402
from master.models_registry import ModelAliasEvent as ModelAliasEvent  # noqa: E402
from master.models_registry import ModelVersion as ModelVersion  # noqa: E402
