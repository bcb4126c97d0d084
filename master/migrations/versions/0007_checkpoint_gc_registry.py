"""checkpoint deletion state (reason, attempts, next try) and the model registry tables

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TZ = sa.DateTime(timezone=True)


def _user_fk(table: str, column: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], ["users.id"], name=op.f(f"fk_{table}_{column}_users"), ondelete="SET NULL"
    )


def _model_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["model_id"], ["models.id"], name=op.f(f"fk_{table}_model_id_models"), ondelete="CASCADE"
    )


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("state_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("state_changed_at", TZ, nullable=True))
        batch.add_column(
            sa.Column("delete_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("next_delete_at", TZ, nullable=True))
    op.execute("UPDATE checkpoints SET state = 'ACTIVE' WHERE state = 'COMPLETED'")

    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("labels", JSONType, nullable=False),
        sa.Column("metadata", JSONType, nullable=False),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        _user_fk("models", "owner_id"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("name", name=op.f("uq_models_name")),
    )
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("checkpoint_uuid", sa.String(length=64), nullable=False),
        sa.Column("checkpoint", JSONType, nullable=False),
        sa.Column("storage_config", JSONType, nullable=False),
        sa.Column("name", sa.String(length=256), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("labels", JSONType, nullable=False),
        sa.Column("metadata", JSONType, nullable=False),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("created_at", TZ, nullable=False),
        _model_fk("model_versions"),
        _user_fk("model_versions", "owner_id"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_versions")),
        sa.UniqueConstraint("model_id", "version", name="uq_model_versions_version"),
    )
    op.create_index(
        op.f("ix_model_versions_model_id"), "model_versions", ["model_id"], unique=False
    )
    op.create_index(
        op.f("ix_model_versions_checkpoint_uuid"),
        "model_versions",
        ["checkpoint_uuid"],
        unique=False,
    )
    op.create_table(
        "model_aliases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("alias", sa.String(length=128), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_by", sa.Integer(), nullable=True),
        sa.Column("updated_at", TZ, nullable=False),
        _model_fk("model_aliases"),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_model_aliases_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        _user_fk("model_aliases", "updated_by"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_aliases")),
        sa.UniqueConstraint("model_id", "alias", name="uq_model_aliases_alias"),
    )
    op.create_index(op.f("ix_model_aliases_model_id"), "model_aliases", ["model_id"], unique=False)
    op.create_table(
        "model_alias_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("alias", sa.String(length=128), nullable=False),
        sa.Column("from_version", sa.Integer(), nullable=True),
        sa.Column("to_version", sa.Integer(), nullable=True),
        sa.Column("username", sa.String(length=128), nullable=True),
        sa.Column("at", TZ, nullable=False),
        _model_fk("model_alias_events"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_alias_events")),
    )
    op.create_index(
        op.f("ix_model_alias_events_model_id"), "model_alias_events", ["model_id"], unique=False
    )


def downgrade() -> None:
    op.drop_table("model_alias_events")
    op.drop_table("model_aliases")
    op.drop_table("model_versions")
    op.drop_table("models")
    op.execute("UPDATE checkpoints SET state = 'COMPLETED' WHERE state = 'ACTIVE'")
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("next_delete_at")
        batch.drop_column("delete_attempts")
        batch.drop_column("state_changed_at")
        batch.drop_column("state_reason")
