"""tasks: anything the cluster runs (a trial, a command, ...); allocations and log lines belong
to tasks. Every trial gets its task (`<experiment id>.<request id>`, as Determined names them),
born in `state_changes`; every allocation points at its trial's task.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("trial_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("resource_pool", sa.String(128), nullable=True),
        sa.Column("slots", sa.Integer(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=True),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column("spec", sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_reason", sa.Text(), nullable=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("ended_at", TZ, nullable=True),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name="fk_tasks_owner_id_users", ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["trial_id"], ["trials.id"], name="fk_tasks_trial_id_trials", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_tasks"),
        sa.UniqueConstraint("trial_id", name="uq_tasks_trial_id"),
    )
    # Checkpoint states are an enum now: the pre-state-machine COMPLETED is what ACTIVE means.
    op.execute("UPDATE checkpoints SET state = 'ACTIVE' WHERE state = 'COMPLETED'")
    op.create_index("ix_tasks_type", "tasks", ["type"])
    op.create_index("ix_tasks_state", "tasks", ["state"])
    _tasks_for_trials()
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("task_id", sa.String(128), nullable=True))
    op.execute(
        "UPDATE allocations SET task_id = "
        "(SELECT tasks.id FROM tasks WHERE tasks.trial_id = allocations.trial_id)"
    )
    with op.batch_alter_table("allocations") as batch:
        batch.alter_column("task_id", existing_type=sa.String(128), nullable=False)
        batch.alter_column("trial_id", existing_type=sa.Integer(), nullable=True)
        batch.create_foreign_key(
            "fk_allocations_task_id_tasks", "tasks", ["task_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index("ix_allocations_task_id", ["task_id"])
    with op.batch_alter_table("task_logs") as batch:
        batch.add_column(sa.Column("task_id", sa.String(128), nullable=True))
        batch.alter_column("trial_id", existing_type=sa.Integer(), nullable=True)
        batch.create_foreign_key(
            "fk_task_logs_task_id_tasks", "tasks", ["task_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index("ix_task_logs_task_id_id", ["task_id", "id"])


def _tasks_for_trials() -> None:
    """One task per existing trial, ACTIVE while the trial has not ended (a stopping trial's
    task ends with it), each with its birth in `state_changes`."""
    op.execute(
        "INSERT INTO tasks (id, type, state, owner_id, trial_id, name, preemptible, created_at, "
        "ended_at) "
        "SELECT CAST(e.id AS VARCHAR(32)) || '.' || t.request_id, 'TRIAL', "
        "CASE WHEN t.state IN ('COMPLETED', 'CANCELED', 'ERROR') THEN t.state ELSE 'ACTIVE' END, "
        "e.owner_id, t.id, "
        "'Trial ' || CAST(t.id AS VARCHAR(32)) || ' (Experiment ' || CAST(e.id AS VARCHAR(32)) "
        "|| ')', "
        "true, t.created_at, t.ended_at "
        "FROM trials t JOIN experiments e ON e.id = t.experiment_id"
    )
    op.execute(
        "INSERT INTO state_changes (entity, entity_id, from_state, to_state, reason, at) "
        "SELECT 'task', id, NULL, state, 'the trial''s task, created by migration 0011', "
        "created_at FROM tasks"
    )


def downgrade() -> None:
    # Only trials' allocations and log lines existed before tasks: other tasks' go with them.
    op.execute("DELETE FROM task_logs WHERE trial_id IS NULL")
    op.execute("DELETE FROM allocations WHERE trial_id IS NULL")
    with op.batch_alter_table("task_logs") as batch:
        batch.drop_index("ix_task_logs_task_id_id")
        batch.drop_constraint("fk_task_logs_task_id_tasks", type_="foreignkey")
        batch.drop_column("task_id")
        batch.alter_column("trial_id", existing_type=sa.Integer(), nullable=False)
    with op.batch_alter_table("allocations") as batch:
        batch.drop_index("ix_allocations_task_id")
        batch.drop_constraint("fk_allocations_task_id_tasks", type_="foreignkey")
        batch.drop_column("task_id")
        batch.alter_column("trial_id", existing_type=sa.Integer(), nullable=False)
    op.execute("DELETE FROM state_changes WHERE entity = 'task'")
    op.drop_index("ix_tasks_state", table_name="tasks")
    op.drop_index("ix_tasks_type", table_name="tasks")
    op.drop_table("tasks")
