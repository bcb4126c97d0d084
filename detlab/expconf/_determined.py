"""Keys of Determined 0.38's experiment-config schema that detlab accepts without acting on.

Pure. Determined configs carry over: such keys are never a hard error, and never silent either.
`unhonoured(raw)` lists the ones a config sets, each with the reason, for a warning; the keys
the schema would otherwise reject are removed from what detlab stores (`strip_unhonoured`).
Keys whose meaning matters to correctness (an Azure checkpoint storage, say) stay errors.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from detlab.expconf._check import describe, expect_int, get_int, get_str, join, mapping
from detlab.expconf._errors import ConfigError
from detlab.expconf._limits import MAX_RUNGS

# Path -> why detlab does not act on it. Paths are top-level keys or "section.key".
UNHONOURED: dict[str, str] = {
    "pbs": "detlab schedules on its own agents, not PBS",
    "profiling": "the system-metrics profiler is not provided",
    "optimizations": "Horovod/AMP optimizations are not applied (use torch.amp in the trial)",
    "integrations": "the Pachyderm integration is not provided",
    "log_policies": "log policies are not evaluated",
    "debug": "Determined's debug mode is not provided",
    "checkpoint_policy": "every checkpoint is kept; garbage collection follows save_* only",
    "tensorboard_storage": "TensorBoard files go to checkpoint_storage (under tensorboard/)",
    "retention_policy": "log retention is the master's setting",
    "workspace": "detlab has no workspaces",
    "project": "detlab has no projects",
    "environment.proxy_ports": "proxies to trial ports are not provided yet",
    "environment.ports": "proxies to trial ports are not provided yet",
    "environment.pod_spec": "applied only in pools of a kubernetes resource manager",
    "environment.drop_capabilities": "capabilities are only added (add_capabilities)",
    "resources.native_parallel": "native parallelism was removed from Determined",
    "resources.is_single_node": "trials already use one agent when their slots fit on one",
    "resources.devices": "devices are not passed to containers",
    "checkpoint_storage.container_path": "trials see shared_fs storage at its host_path",
    "checkpoint_storage.checkpoint_path": "trials see shared_fs storage at its host_path",
    "checkpoint_storage.tensorboard_path": "TensorBoard files go under tensorboard/ in storage",
    "searcher.source_trial_id": "warm starts from another trial are not provided",
    # Valid in 0.38's schema, refused by detlab until issue 40: accepted, named, dropped.
    "preemption_timeout": "the master's preemption_timeout applies to every trial",
    "security.kerberos": "Kerberos is for Slurm/PBS clusters",
    "resources.slots": "a command's slot count; experiments use slots_per_trial",
    # Legacy keys 0.38 itself ignores with a warning.
    "resources.agent_label": "legacy: agent labels were replaced by resource pools",
    "data_layer": "legacy: the data layer was removed from Determined",
    "internal": "legacy: internal settings are not read",
}

# The subset detlab's schema does not know at all: removed before validation.
STRIPPED = frozenset(
    {
        "pbs",
        "tensorboard_storage",
        "retention_policy",
        "environment.proxy_ports",
        "resources.native_parallel",
        "checkpoint_storage.container_path",
        "checkpoint_storage.checkpoint_path",
        "checkpoint_storage.tensorboard_path",
        "preemption_timeout",
        "security",
        "resources.slots",
        "resources.agent_label",
        "data_layer",
        "internal",
    }
)


def _present(raw: Mapping[str, Any], path: str) -> bool:
    section, _, key = path.partition(".")
    if not key:
        return _set(raw.get(section))
    sub = raw.get(section)
    return isinstance(sub, Mapping) and _set(sub.get(key))


def _set(value: Any) -> bool:
    """Set to something that asks for behaviour (`debug: false`, `ports: {}` ask for none)."""
    return value is not None and value is not False and value != {} and value != []


def unhonoured(raw: Any) -> list[tuple[str, str]]:
    """(path, why) for every key `raw` sets that detlab accepts but does not act on."""
    if not isinstance(raw, Mapping):
        return []
    return [(path, why) for path, why in UNHONOURED.items() if _present(raw, path)]


def warnings_for(raw: Any) -> list[str]:
    """One line per unhonoured key, for the CLI and the master's response."""
    return [
        f"{path} is accepted but not honoured by detlab: {why}" for path, why in unhonoured(raw)
    ] + searcher_notes(raw)


def strip_unhonoured(raw: Any) -> Any:
    """A copy of `raw` without the keys detlab's schema does not know (see STRIPPED), legacy
    searchers translated; the dropped keys that have a shape in 0.38 are checked first."""
    if not isinstance(raw, Mapping):
        return raw
    _check_dropped(raw)
    out = copy.deepcopy(dict(raw))
    if isinstance(out.get("searcher"), Mapping) and out["searcher"].get("name") == ASYNC_HALVING:
        out["searcher"] = _async_halving_as_asha(out["searcher"])
    for path in STRIPPED:
        section, _, key = path.partition(".")
        if not key:
            out.pop(section, None)
        elif isinstance(out.get(section), Mapping):
            sub = dict(out[section])
            sub.pop(key, None)
            out[section] = sub
    return out


def _check_dropped(raw: Mapping[str, Any]) -> None:
    """Dropped is not unchecked: the keys 0.38 gives a type keep it (a typo still fails)."""
    get_int(raw, "preemption_timeout", "", None, minimum=0)
    if raw.get("security") is not None:
        security = mapping(raw["security"], "security", ("kerberos",))
        if security.get("kerberos") is not None:
            kerberos = mapping(security["kerberos"], "security.kerberos", ("config_file",))
            get_str(kerberos, "config_file", "security.kerberos", None)
    resources = raw.get("resources")
    if isinstance(resources, Mapping):
        get_int(resources, "slots", "resources", None, minimum=0)
        get_str(resources, "agent_label", "resources", None, allow_empty=True)


# Determined's single-bracket ASHA; 0.38 runs it as adaptive_asha with one bracket.
ASYNC_HALVING = "async_halving"
_ASYNC_HALVING_KEYS = (
    "name",
    "num_rungs",
    "max_length",
    "max_trials",
    "divisor",
    "max_concurrent_trials",
    "stop_once",
    "metric",
    "smaller_is_better",
    "source_trial_id",
    "source_checkpoint_uuid",
)


def _async_halving_as_asha(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`async_halving` with `num_rungs: R` is adaptive_asha with the one bracket `[R]`."""
    fields = mapping(raw, "searcher", _ASYNC_HALVING_KEYS)
    rungs = fields.pop("num_rungs", None)
    if rungs is None:
        raise ConfigError(join("searcher", "num_rungs"), "required by async_halving")
    rungs = expect_int(rungs, "searcher.num_rungs", minimum=1, limit=MAX_RUNGS)
    return {**fields, "name": "adaptive_asha", "bracket_rungs": [rungs], "max_rungs": rungs}


def searcher_notes(raw: Any) -> list[str]:
    """What detlab does with a legacy searcher name, for the warnings."""
    searcher = raw.get("searcher") if isinstance(raw, Mapping) else None
    if isinstance(searcher, Mapping) and searcher.get("name") == ASYNC_HALVING:
        rungs = describe(searcher.get("num_rungs"))
        return [
            f"searcher.name async_halving runs as adaptive_asha with one bracket of {rungs} "
            "rungs, as Determined 0.38 does"
        ]
    return []
