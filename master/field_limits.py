"""Every free-text field a user can set, bounded in one place (pure): a 400 names the field and
its limit. The numbers live in `detlab.expconf.limits`, beside the experiment config's own (an
experiment's description and labels are set through its config too).

Without them a 50 MB model description made every `GET /models` 52 MB, and a label list of
100,000 entries or a 10 MB password was stored as sent.
"""

from __future__ import annotations

from typing import Any

from detlab.expconf import limits
from master.errors import BadRequest

MAX_DESCRIPTION = limits.MAX_DESCRIPTION
MAX_NOTES = limits.MAX_NOTES
MAX_LABEL = limits.MAX_LABEL
MAX_LABELS = limits.MAX_LABELS
MAX_PASSWORD = limits.MAX_PASSWORD
MIN_PASSWORD = 8

# field name -> its limit in characters (also printed in master/api/openapi.yaml)
TEXT_FIELDS = {
    "description": MAX_DESCRIPTION,
    "comment": MAX_DESCRIPTION,
    "notes": MAX_NOTES,
}


def check_text(value: Any, field: str, maximum: int | None = None) -> str | None:
    """An optional string field: None, or a string of at most `maximum` characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{field} must be a string", path=field)
    limit = TEXT_FIELDS[field] if maximum is None else maximum
    if len(value) > limit:
        raise BadRequest(f"{field} is {len(value):,} characters; at most {limit:,}", path=field)
    return value


def check_labels(value: Any, field: str = "labels") -> list[str]:
    """A list of at most MAX_LABELS distinct non-empty strings of at most MAX_LABEL each."""
    if not isinstance(value, list):
        raise BadRequest(f"{field} must be a list of strings", path=field)
    if len(value) > MAX_LABELS:
        raise BadRequest(f"{field}: at most {MAX_LABELS} labels, got {len(value):,}", path=field)
    for i, label in enumerate(value):
        if not isinstance(label, str) or not 0 < len(label) <= MAX_LABEL:
            raise BadRequest(
                f"{field}[{i}] must be a non-empty string of at most {MAX_LABEL} characters",
                path=f"{field}[{i}]",
            )
    return list(dict.fromkeys(value))


def check_new_password(value: Any, field: str = "password") -> str:
    """A new password: a string of MIN_PASSWORD to MAX_PASSWORD characters."""
    if not isinstance(value, str) or not MIN_PASSWORD <= len(value) <= MAX_PASSWORD:
        raise BadRequest(
            f"{field} must be a string of {MIN_PASSWORD} to {MAX_PASSWORD:,} characters",
            path=field,
        )
    return value
