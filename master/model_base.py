"""What every model module shares: the declarative base as mypy sees it, and the column types
(JSON on PostgreSQL as JSONB, timestamps with their time zone)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import JSON, DateTime
from sqlalchemy.dialects.postgresql import JSONB

from master.db import db

if TYPE_CHECKING:  # mypy cannot follow Flask-SQLAlchemy's generated db.Model; it is a Base
    from master.db import Base as _DbModel
else:
    _DbModel = db.Model

# JSONB on PostgreSQL (compact, indexable), plain JSON text elsewhere.
JSONType = JSON().with_variant(JSONB(), "postgresql")
TZ = DateTime(timezone=True)
