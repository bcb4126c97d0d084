"""Tenant isolation on agents: users' linked Unix identities (`det user link-with-agent-user`)
and per-agent credentials (`agent_credentials`, stored as sha256)

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("agent_uid", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("agent_gid", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("agent_user", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("agent_group", sa.String(length=64), nullable=True))
    op.create_table(
        "agent_credentials",
        sa.Column("agent_id", sa.String(length=128), nullable=False),
        sa.Column("credential_hash", sa.String(length=64), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", name=op.f("pk_agent_credentials")),
        sa.UniqueConstraint("credential_hash", name=op.f("uq_agent_credentials_credential_hash")),
    )


def downgrade() -> None:
    op.drop_table("agent_credentials")
    with op.batch_alter_table("users") as batch:
        for column in ("agent_group", "agent_user", "agent_gid", "agent_uid"):
            batch.drop_column(column)
