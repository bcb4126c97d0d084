"""Determined compatibility: agent addresses (container_addrs), experiment labels, config templates

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("address", sa.String(length=256), nullable=True))
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("labels", json_type, nullable=True))
    op.create_table(
        "config_templates",
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("config", json_type, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_config_templates")),
    )


def downgrade() -> None:
    op.drop_table("config_templates")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("labels")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("address")
