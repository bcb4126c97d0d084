"""instances + provisioner_pools: elastic agents launched in the cloud, with join tokens

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "provisioner_pools",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("cluster_id", sa.String(length=64), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_error_at", TZ, nullable=True),
        sa.Column("launch_failures", sa.Integer(), nullable=False),
        sa.Column("backoff_until", TZ, nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_provisioner_pools")),
    )
    op.create_table(
        "instances",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("provider", sa.String(length=8), nullable=False),
        sa.Column("cloud_id", sa.String(length=128), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("instance_type", sa.String(length=128), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("spot", sa.Boolean(), nullable=False),
        sa.Column("launched_at", TZ, nullable=False),
        sa.Column("connected_at", TZ, nullable=True),
        sa.Column("last_busy_at", TZ, nullable=True),
        sa.Column("interrupted_at", TZ, nullable=True),
        sa.Column("terminated_at", TZ, nullable=True),
        sa.Column("join_token_hash", sa.String(length=64), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
        sa.UniqueConstraint("cloud_id", name=op.f("uq_instances_cloud_id")),
        sa.UniqueConstraint("join_token_hash", name=op.f("uq_instances_join_token_hash")),
    )
    op.create_index(op.f("ix_instances_pool"), "instances", ["pool"])
    op.create_index(op.f("ix_instances_state"), "instances", ["state"])


def downgrade() -> None:
    op.drop_index(op.f("ix_instances_state"), table_name="instances")
    op.drop_index(op.f("ix_instances_pool"), table_name="instances")
    op.drop_table("instances")
    op.drop_table("provisioner_pools")
