"""What `det experiment continue` changes, decided without I/O (pure; tested alone).

Determined 0.38's ContinueExperiment re-opens an ended single-trial experiment: the config the
user overrides is merged over the experiment's own (the override wins, as a config over a
template), and the same trial trains on from its latest checkpoint. The trial keeps the values
it was given; only a constant hyperparameter may change (its new value is the trial's), because a
sampled one would have to be drawn again and the trial would no longer be the same trial.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detlab.expconf import ConfigError
from detlab.expconf._merge import merge

# The searcher whose experiment is continued with overrides, its one trial training on.
SINGLE = "single"
# The searches continued as they were (no overrides): their unfinished trials train on and the
# trials never created are created (Determined 0.38's ContinueExperiment).
SEARCHES = frozenset({"grid", "random"})


def merged_config(original: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """The override over the experiment's original config (Determined's merge rules)."""
    if not isinstance(override, Mapping):
        raise ConfigError("", "the override config must be a mapping of config keys")
    return merge(original, override)


def check_searcher(
    old_name: str, new_name: str, num_trials: int, exp_id: int, overridden: bool = False
) -> None:
    """A single-trial (`single` searcher) experiment is continued and stays one; a grid or
    random search is continued without overrides (Determined's rules)."""
    if old_name in SEARCHES:
        if overridden:
            raise ConfigError(
                "override_config",
                f"experiment {exp_id} is a {old_name} search: it is continued as it was, "
                "without an override config (only a single-trial experiment takes one)",
            )
        return
    if old_name != SINGLE or num_trials != 1:
        raise ConfigError(
            "searcher.name",
            f"experiment {exp_id} is a {old_name} search with {num_trials} trial(s); "
            "continue takes a single-trial experiment (searcher.name: single) or a grid or "
            "random search",
        )
    if new_name != SINGLE:
        raise ConfigError(
            "searcher.name",
            f"the override makes it a {new_name} search; a continued experiment stays single",
        )


def continued_hparams(
    old: Mapping[str, Any], new: Mapping[str, Any], values: Mapping[str, Any], path: str = ""
) -> dict[str, Any]:
    """The trial's hyperparameter values under the continued config's (expanded) space.

    Unchanged entries keep the trial's value; a changed or added `const` takes its new value;
    any other change (a sampled range, a removed name) is refused naming it.
    """
    out: dict[str, Any] = {}
    for name in sorted(set(old) | set(new)):
        where = f"{path}.{name}" if path else f"hyperparameters.{name}"
        if name not in new:
            raise ConfigError(where, "a continued trial keeps its hyperparameters; not removed")
        spec = new[name]
        if old.get(name) == spec and name in values:
            out[name] = values[name]
        elif spec.get("type") == "const":
            out[name] = spec["val"]
        elif spec.get("type") == "object" and old.get(name, {}).get("type") == "object":
            inner = values.get(name)
            out[name] = continued_hparams(
                old[name]["vals"], spec["vals"], inner if isinstance(inner, Mapping) else {}, where
            )
        else:
            raise ConfigError(
                where,
                "a continued trial keeps its sampled value; only a constant value can change",
            )
    return out
