"""metrics.superseded (reports a restored trial re-does, kept for audit); model definitions move
out of `experiments` into 1 MiB chunks (`model_def_chunks`), so no experiment query loads them

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

CHUNK = 1 << 20


def upgrade() -> None:
    with op.batch_alter_table("metrics") as batch:
        batch.add_column(
            sa.Column("superseded", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_table(
        "model_def_chunks",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
            name=op.f("fk_model_def_chunks_experiment_id_experiments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("experiment_id", "seq", name=op.f("pk_model_def_chunks")),
    )
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("model_def_size", sa.BigInteger(), nullable=True))
    _copy_model_defs_out()
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("model_def")


def _copy_model_defs_out() -> None:
    """One experiment's blob in memory at a time (this runs once, on the upgrade)."""
    conn = op.get_bind()
    ids: list[int] = list(
        conn.execute(
            sa.text("SELECT id FROM experiments WHERE model_def IS NOT NULL ORDER BY id")
        ).scalars()
    )
    for exp_id in ids:
        blob: bytes = conn.execute(
            sa.text("SELECT model_def FROM experiments WHERE id = :e"), {"e": exp_id}
        ).scalar_one()
        blob = bytes(blob)
        for seq, start in enumerate(range(0, max(len(blob), 1), CHUNK)):
            conn.execute(
                sa.text(
                    "INSERT INTO model_def_chunks (experiment_id, seq, data) VALUES (:e, :s, :d)"
                ),
                {"e": exp_id, "s": seq, "d": blob[start : start + CHUNK]},
            )
        conn.execute(
            sa.text("UPDATE experiments SET model_def_size = :n WHERE id = :e"),
            {"n": len(blob), "e": exp_id},
        )


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("model_def", sa.LargeBinary(), nullable=True))
    conn = op.get_bind()
    ids: list[int] = list(
        conn.execute(sa.text("SELECT DISTINCT experiment_id FROM model_def_chunks")).scalars()
    )
    for exp_id in ids:
        parts: list[bytes] = list(
            conn.execute(
                sa.text("SELECT data FROM model_def_chunks WHERE experiment_id = :e ORDER BY seq"),
                {"e": exp_id},
            ).scalars()
        )
        conn.execute(
            sa.text("UPDATE experiments SET model_def = :d WHERE id = :e"),
            {"d": b"".join(bytes(p) for p in parts), "e": exp_id},
        )
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("model_def_size")
    op.drop_table("model_def_chunks")
    with op.batch_alter_table("metrics") as batch:
        batch.drop_column("superseded")
