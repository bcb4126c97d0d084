"""The model registry's tables: registered models, their numbered versions (each a copy of a
checkpoint's record), movable aliases and every move of an alias. Part of master/models.py's
durable state (imported there, so one metadata holds every table)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Boolean, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from master.db import utcnow
from master.model_base import TZ, JSONType, _DbModel

if TYPE_CHECKING:
    from master.models import User


class Model(_DbModel):
    """A registered model: a name with numbered versions, each pointing at a checkpoint."""

    __tablename__ = "models"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(256), unique=True)
    description: Mapped[str | None] = mapped_column(Text)
    labels: Mapped[list] = mapped_column(JSONType, default=list)
    metadata_: Mapped[dict] = mapped_column("metadata", JSONType, default=dict)
    notes: Mapped[str | None] = mapped_column(Text)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    owner: Mapped[User | None] = relationship()


class ModelVersion(_DbModel):
    """Version N of a model. The checkpoint's record (and where its files are) is copied in, so
    the version outlives its experiment's rows; GC never deletes a registered checkpoint."""

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "version", name="uq_model_versions_version"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    checkpoint_uuid: Mapped[str] = mapped_column(String(64), index=True)
    # checkpoint_json() of the checkpoint + lineage (trial, experiment, hparams, validation).
    checkpoint: Mapped[dict] = mapped_column(JSONType, default=dict)
    # The experiment's checkpoint_storage (with credentials): server-side only, never returned.
    storage_config: Mapped[dict] = mapped_column(JSONType, default=dict)
    name: Mapped[str | None] = mapped_column(String(256))
    comment: Mapped[str | None] = mapped_column(Text)
    labels: Mapped[list] = mapped_column(JSONType, default=list)
    metadata_: Mapped[dict] = mapped_column("metadata", JSONType, default=dict)
    notes: Mapped[str | None] = mapped_column(Text)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
    owner: Mapped[User | None] = relationship()


class ModelAlias(_DbModel):
    """A movable name (`production`, `candidate`, ...) for one version of a model."""

    __tablename__ = "model_aliases"
    __table_args__ = (UniqueConstraint("model_id", "alias", name="uq_model_aliases_alias"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    alias: Mapped[str] = mapped_column(String(128))
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    updated_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    updated_at: Mapped[datetime] = mapped_column(TZ, default=utcnow)


class ModelAliasEvent(_DbModel):
    """Every move of an alias: from which version to which, by whom, when."""

    __tablename__ = "model_alias_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    alias: Mapped[str] = mapped_column(String(128))
    from_version: Mapped[int | None] = mapped_column(Integer)
    to_version: Mapped[int | None] = mapped_column(Integer)
    username: Mapped[str | None] = mapped_column(String(128))
    at: Mapped[datetime] = mapped_column(TZ, default=utcnow)
