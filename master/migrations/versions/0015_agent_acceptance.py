"""agents.isolation and agents.unix_uid: whose tasks an agent runs, as its polls say, so the
scheduler keeps other users' tasks off an agent that cannot isolate them (issue 37)

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: an agent that has not polled since says nothing yet, which the
    # scheduler takes as "anyone's tasks" (what it did before) until its next poll.
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("isolation", sa.String(16), nullable=True))
        batch.add_column(sa.Column("unix_uid", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("unix_uid")
        batch.drop_column("isolation")
