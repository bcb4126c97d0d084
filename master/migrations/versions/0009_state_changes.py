"""state_changes: why each entity changed state; allocations get exit_cause, lose preempt_acked

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "state_changes",
        sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
        sa.Column("entity", sa.String(16), nullable=False),
        sa.Column("entity_id", sa.String(128), nullable=False),
        sa.Column("from_state", sa.String(32), nullable=True),
        sa.Column("to_state", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_state_changes_entity", "state_changes", ["entity", "entity_id", "id"])
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("preempt_acked")
        batch.add_column(sa.Column("exit_cause", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("exit_cause")
        batch.add_column(
            sa.Column("preempt_acked", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.drop_index("ix_state_changes_entity", table_name="state_changes")
    op.drop_table("state_changes")
