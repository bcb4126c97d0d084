"""`determined.util` names trials import."""

from __future__ import annotations

import copy
from typing import Any


def merge_dicts(base_dict: dict[Any, Any], source_dict: dict[Any, Any]) -> dict[Any, Any]:
    """A new dict: `source_dict`'s values over `base_dict`'s, nested dicts merged key by key
    (a dict in `source_dict` replaces a non-dict in `base_dict`); the inputs are unchanged."""
    merged = copy.deepcopy(base_dict)
    for key, value in source_dict.items():
        if isinstance(value, dict) and isinstance(base_dict.get(key), dict):
            merged[key] = merge_dicts(base_dict[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
