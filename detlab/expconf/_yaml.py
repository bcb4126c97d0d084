"""YAML loading: safe, rejects duplicate keys, and turns syntax errors into ConfigError."""

from __future__ import annotations

from typing import Any

import yaml

from detlab.expconf._errors import ConfigError
from detlab.expconf._yamlbounds import check_yaml_bounds

_Base: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_Base):
    """A SafeLoader that refuses duplicate mapping keys (PyYAML silently keeps the last)."""


def _construct_mapping(loader: Any, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable key: let the base constructor report it
            break
        if duplicate:
            mark = key_node.start_mark
            raise ConfigError(
                f"invalid YAML: duplicate key {key!r} "
                f"(line {mark.line + 1}, column {mark.column + 1})"
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str) -> Any:
    """Parse YAML text; syntax errors become a ConfigError naming line and column, and a
    document that would expand past the value or depth bounds one naming the bound."""
    try:
        check_yaml_bounds(text, _StrictLoader)  # before a single object is built
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "syntax error"
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"invalid YAML: {problem}{where}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid YAML: {e}") from None
