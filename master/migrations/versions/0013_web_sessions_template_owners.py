"""auth_tokens.kind (a web session id is not a bearer token); config_templates.owner_id
(existing templates belong to the admin)

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("auth_tokens") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(8), nullable=False, server_default=sa.text("'api'"))
        )
    with op.batch_alter_table("config_templates") as batch:
        batch.add_column(sa.Column("owner_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_config_templates_owner_id_users"),
            "users",
            ["owner_id"],
            ["id"],
            ondelete="SET NULL",
        )
    # The user named admin (the one the master creates), else the oldest admin.
    op.execute(
        "UPDATE config_templates SET owner_id = COALESCE("
        "(SELECT id FROM users WHERE username = 'admin'), "
        "(SELECT MIN(id) FROM users WHERE admin = true))"
    )


def downgrade() -> None:
    with op.batch_alter_table("config_templates") as batch:
        batch.drop_constraint(op.f("fk_config_templates_owner_id_users"), type_="foreignkey")
        batch.drop_column("owner_id")
    with op.batch_alter_table("auth_tokens") as batch:
        batch.drop_column("kind")
