"""The bounds of an experiment config: every number the master stores or schedules fits what it
can honour (its database columns, its memory, a search it can run), and a document cannot
cost the master a hang or memory (deep nesting, YAML aliases that expand exponentially).

docs/determined-compat.md ("Limits") lists these numbers; change both together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detlab.expconf._errors import ConfigError
from detlab.text import bad_text, clean_text

# -- the document as a whole ----------------------------------------------------------------
MAX_DEPTH = 32  # nesting of mappings and lists (hyperparameter groups nest a few levels)
MAX_NODES = 100_000  # values after YAML aliases are expanded (a "billion laughs" stops here)
MAX_STRING = 64 * 1024  # characters in any one string value or key

# -- fields -------------------------------------------------------------------------------------
MAX_NAME = 512  # experiments.name is VARCHAR(512)
MAX_LABEL = 255
MAX_LABELS = 100  # labels on one experiment, model or model version
MAX_DESCRIPTION = 16 * 1024  # experiment and model descriptions, version comments (characters)
MAX_NOTES = 256 * 1024  # model and version notes: a page of Markdown (characters)
MAX_PASSWORD = 1024  # characters; hashing a 10 MB one cost the master seconds of CPU
MAX_SHORT = 255  # pools, metric names, images, uuids and other identifiers
INT32_MAX = 2**31 - 1  # INTEGER columns (trial ids, restarts, priorities)
# Training lengths (batches, records, epochs, max_time) are stored in BIGINT columns and
# multiplied by records_per_epoch and ASHA divisors: 2**53 keeps every such product exact in
# a float and far inside 64 bits.
MAX_LENGTH = 2**53
MAX_RECORDS_PER_EPOCH = 2**40
MAX_TRIALS = INT32_MAX  # the schema's ceiling; the master's `max_search_trials` is lower
MAX_SLOTS_PER_TRIAL = 4096
MAX_RESTARTS = 10_000
MAX_WEIGHT = 1e6
MAX_DIVISOR = 1000.0
MAX_RUNGS = 64  # ASHA: MAX_DIVISOR**MAX_RUNGS (1e192) stays a finite float
MAX_HP_INT = 2**63 - 1  # int hyperparameter bounds: 64-bit integers
MAX_KEEP = 1_000_000  # checkpoint GC: save_trial_best and friends


def check_document(raw: Any) -> None:
    """Depth, size and text of a parsed YAML/JSON document, before any field is read.

    Iterative, counting a value reached through an alias each time it is reached (that is
    what JSON storage would write out). Raises ConfigError naming the first bad path.
    """
    stack: list[tuple[Any, str, int]] = [(raw, "", 0)]
    nodes = 0
    while stack:
        node, path, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ConfigError(
                f"the config has more than {MAX_NODES:,} values (after expanding YAML aliases)"
            )
        if isinstance(node, str):
            _check_text(node, path, "value")
        elif isinstance(node, Mapping | list | tuple):
            if depth >= MAX_DEPTH:
                raise ConfigError(path, f"nested deeper than {MAX_DEPTH} levels")
            if isinstance(node, Mapping):
                for key, child in node.items():
                    here = join_path(path, key)
                    if isinstance(key, str):
                        _check_text(key, here, "key")
                    stack.append((child, here, depth + 1))
            else:
                for i, child in enumerate(node):
                    stack.append((child, f"{path}[{i}]", depth + 1))


def storable_json(raw: Any) -> Any:
    """`raw` checked by `check_document` and copied as plain JSON (no dates, NaN, sets)."""
    from detlab.expconf._check import json_value

    check_document(raw)
    return json_value(raw, "")


def join_path(path: str, key: Any) -> str:
    shown = clean_text(str(key)[:80])
    return f"{path}.{shown}" if path else shown


def _check_text(text: str, path: str, what: str) -> None:
    if len(text) > MAX_STRING:
        raise ConfigError(path, f"{what} is {len(text):,} characters; at most {MAX_STRING:,}")
    if why := bad_text(text):
        raise ConfigError(path, f"{what} {why}")


def check_length(value: str, path: str, maximum: int) -> str:
    """A string field's length against its column."""
    if len(value) > maximum:
        raise ConfigError(path, f"at most {maximum:,} characters, got {len(value):,}")
    return value
