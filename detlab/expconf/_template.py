"""Checking a configuration template when it is set, not first when an experiment uses it.

A template is a partial experiment config: it may leave out what every config needs (the
entrypoint, the searcher's metric) but every key it has must exist and hold the right type. Each
top-level section is checked on its own, merged over a minimal complete config, so a section the
template leaves partial ("required" fields missing) does not hide a mistake in another one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detlab.expconf._check import describe, mapping
from detlab.expconf._determined import strip_unhonoured
from detlab.expconf._errors import ConfigError
from detlab.expconf._schema import TOP_LEVEL_KEYS, _merge, validate_experiment_config

# The fields every config must have, with placeholder values; never stored anywhere.
_COMPLETE: dict[str, Any] = {
    "entrypoint": "true",
    "searcher": {"name": "single", "metric": "m", "max_length": {"batches": 1}},
}
# Sections that are checked against another section's value.
_WITH = {"environment": ("resources",), "searcher": ("hyperparameters",)}


def validate_template(raw: Any) -> None:
    """Raise ConfigError (with the schema's did-you-mean hint) for an unknown key or a wrong type
    anywhere in the template; fields left out are fine."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"a template must be a mapping of experiment-config keys, got {describe(raw)}"
        )
    fields = mapping(strip_unhonoured(raw), "", TOP_LEVEL_KEYS)
    for key in fields:
        section = {k: fields[k] for k in (key, *_WITH.get(key, ())) if k in fields}
        try:
            validate_experiment_config(_merge(section, _COMPLETE))
        except ConfigError as e:
            if not _left_out(e):
                raise


def _left_out(e: ConfigError) -> bool:
    """A field the template may leave to the experiment's config: it says "required"."""
    return e.message.startswith("required")
