"""tasks.context_sha256 / context_size and task_context_chunks: a command's, notebook's or
shell's `--context` directory (.tar.gz), kept in 1 MiB chunks like model definitions (issue 38)

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("context_sha256", sa.String(64), nullable=True))
        batch.add_column(sa.Column("context_size", sa.BigInteger(), nullable=True))
    op.create_table(
        "task_context_chunks",
        sa.Column("task_id", sa.String(128), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_task_context_chunks_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", "seq", name=op.f("pk_task_context_chunks")),
    )


def downgrade() -> None:
    op.drop_table("task_context_chunks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("context_size")
        batch.drop_column("context_sha256")
