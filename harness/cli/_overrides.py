"""`--config key.path=value` overrides (Determined's `det experiment create --config`). Pure."""

from __future__ import annotations

from typing import Any

import yaml


class OverrideError(ValueError):
    pass


def apply_overrides(raw: Any, overrides: list[str]) -> dict[str, Any]:
    """A copy of the config with each `a.b.c=value` set (the value parsed as YAML)."""
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(raw)) if raw else {}
    if not isinstance(out, dict):
        raise OverrideError("the config is not a mapping; --config cannot be applied")
    for spec in overrides:
        key, sep, text = spec.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise OverrideError(f"--config {spec!r}: expected KEY.PATH=VALUE")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as e:
            raise OverrideError(f"--config {spec!r}: the value is not valid YAML: {e}") from e
        node = out
        for i, part in enumerate(parts[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                where = ".".join(parts[: i + 1])
                raise OverrideError(f"--config {spec!r}: {where} is not a mapping")
            node = nxt
        node[parts[-1]] = value
    return out
