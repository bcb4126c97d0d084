"""allocations.out_of_work: the trial's process was last told the searcher had no work for it,
so its exit 0 means "waiting for the searcher" even when a promotion raised the trial's target
before the exit was seen (issue 42's ASHA-across-a-restart finding)

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(
            sa.Column("out_of_work", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("out_of_work")
