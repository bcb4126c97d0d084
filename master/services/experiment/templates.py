"""Configuration templates: named config fragments merged under experiment configs at submit."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select

from detlab.expconf import ConfigError, limits, load_yaml, validate_template
from detlab.expconf._merge import merge_with_sources
from master.auth import Principal, can_steer
from master.db import db, iso, utcnow
from master.errors import BadRequest, Forbidden, NotFound
from master.models import ConfigTemplate

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$")


def _check_name(name: str) -> None:
    if not _NAME.match(name or ""):
        raise BadRequest(
            "a template name uses letters, digits, '.', '_' and '-' (at most 256)", path="name"
        )


def parse_template(config: Any) -> dict[str, Any]:
    """A template body: YAML text or a mapping of experiment-config keys, each of the right type
    (a typo like `priorty:` is refused now, not when an experiment first uses the template)."""
    if isinstance(config, str):
        try:
            config = load_yaml(config)
        except ConfigError as e:
            where = "config." + e.path if e.path else "config"
            raise BadRequest(f"the template is not valid YAML: {e.message}", path=where) from e
    if not isinstance(config, dict):
        raise BadRequest("a template must be a mapping of experiment-config keys", path="config")
    try:
        stored = limits.storable_json(config)  # bounded, and storable as JSONB
        validate_template(stored)
        return stored
    except ConfigError as e:
        raise BadRequest(
            f"template: {e}", path="config." + e.path if e.path else "config"
        ) from None


def template_json(t: ConfigTemplate) -> dict[str, Any]:
    return {
        "name": t.name,
        "config": t.config,
        "owner": t.owner.username if t.owner else None,
        "created_at": iso(t.created_at),
        "updated_at": iso(t.updated_at),
    }


def list_templates() -> list[ConfigTemplate]:
    return list(db.session.execute(select(ConfigTemplate).order_by(ConfigTemplate.name)).scalars())


def get_template(name: str) -> ConfigTemplate:
    t = None if "\x00" in name else db.session.get(ConfigTemplate, name)  # no name holds NUL
    if t is None:
        raise NotFound(f"template {name!r} not found")
    return t


def _may_change(t: ConfigTemplate, by: Principal) -> None:
    """Others read and use a template (it merges into their configs); only its owner or an
    admin may change or remove it."""
    if not can_steer(by, t.owner_id if t.owner_id is not None else -1):
        owner = t.owner.username if t.owner else "nobody (its owner was removed)"
        raise Forbidden(
            f"template {t.name!r} belongs to {owner}; only its owner or an admin may change "
            "or remove it (copy it under a new name to change your own)"
        )


def set_template(name: str, config: Any, by: Principal) -> tuple[ConfigTemplate, bool]:
    """Create (owned by `by`) or replace; True when it was created."""
    _check_name(name)
    t = db.session.get(ConfigTemplate, name)
    if t is not None:
        _may_change(t, by)
    body = parse_template(config)
    created = t is None
    if t is None:
        t = ConfigTemplate(
            name=name,
            config=body,
            owner_id=by.user_id,
            created_at=utcnow(),
            updated_at=utcnow(),
        )
        db.session.add(t)
    else:
        t.config = body
        t.updated_at = utcnow()
    db.session.commit()
    return t, created


def remove_template(name: str, by: Principal) -> None:
    t = get_template(name)
    _may_change(t, by)
    db.session.delete(t)
    db.session.commit()


def apply_template(name: str, raw: Any, config_name: str = "config") -> tuple[Any, dict[str, str]]:
    """The experiment config `raw` merged over template `name` (Determined's rules), with the
    source of every key."""
    t = get_template(name)
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping at the top level, got {type(raw).__name__}")
    merged, sources = merge_with_sources(t.config, raw, f"template {name}", config_name)
    # The bounds hold for what the merge made, not just for each side: two documents under
    # the value cap can merge into one over it.
    limits.check_document(merged)
    return merged, sources
