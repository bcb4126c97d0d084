"""A task's environment, built one way for every runtime (pure: no I/O).

The layers, later winning: what the runtime inherits (the agent's own environment for a local
process, nothing for a container) < the experiment's `environment_variables` < the master's
DET_* variables < what the agent itself decides (master URL, agent id, devices, paths). The
runtimes differ only in their `EnvLayout`: where the harness and the model directory are, and
how GPUs are numbered.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from detlab.protocol import StartSpec

# Never handed to user code: whoever holds it could pose as an agent.
SCRUBBED_ENV = ("DET_AGENT_TOKEN", "DET_AGENT_CREDENTIAL")


@dataclass(frozen=True)
class EnvLayout:
    """Where a runtime's task finds things."""

    # The environment the task starts from (before the experiment's variables).
    inherited: Mapping[str, str] = field(default_factory=dict)
    # PYTHONPATH's first entries: the harness, the model directory, the `determined` alias.
    code_dirs: tuple[str, ...] = ()
    # PYTHONPATH's tail when the task sets none (a container image's own PYTHONPATH).
    default_pythonpath: str = ""
    # PATH's first entries (the agent's interpreter for a local process).
    path_first: tuple[str, ...] = ()
    # True in a container: its GPUs are numbered from 0 (the device request picks them).
    renumber_gpus: bool = False
    # A task run as another identity: its HOME (its own, else its work dir) and user name.
    home: str | None = None
    user: str | None = None


def user_env_vars(environment: Any, gpu: bool) -> dict[str, str]:
    """`environment.environment_variables` in any of Determined's forms: a mapping, a list of
    "K=V", or per-device lists `{cpu: [...], cuda: [...]}`."""
    if not environment:
        return {}
    raw = environment.get("environment_variables") if isinstance(environment, dict) else None
    if not raw:
        return {}
    if isinstance(raw, dict) and set(raw) <= {"cpu", "cuda", "gpu", "rocm"}:
        raw = raw.get("cuda" if gpu else "cpu") or (raw.get("gpu") if gpu else None) or []
    out: dict[str, str] = {}
    if isinstance(raw, dict):
        out = {str(k): "" if v is None else str(v) for k, v in raw.items()}
    elif isinstance(raw, list):
        for item in raw:
            key, sep, value = str(item).partition("=")
            if sep and key:
                out[key] = value
    return out


def prepend(path_var: str | None, first: list[str] | tuple[str, ...]) -> str:
    """`first` (empty entries dropped) ahead of `path_var`'s entries, each entry once."""
    parts = [p for p in first if p]
    rest = [p for p in (path_var or "").split(os.pathsep) if p and p not in parts]
    return os.pathsep.join(parts + rest)


def gpu_indexes(spec: StartSpec, slots: list[dict[str, Any]]) -> list[int]:
    """The agent's indexes of the spec's slots that are GPUs, in the spec's order."""
    types = {int(s["index"]): s.get("type") for s in slots}
    return [i for i in spec.slot_indexes if types.get(i) == "gpu"]


def task_env(
    spec: StartSpec,
    *,
    slots: list[dict[str, Any]],
    master_url: str,
    agent_id: str,
    layout: EnvLayout,
) -> dict[str, str]:
    """The environment a task of `spec` runs with."""
    gpus = gpu_indexes(spec, slots)
    env = {k: v for k, v in layout.inherited.items() if k not in SCRUBBED_ENV}
    env.update(user_env_vars(spec.environment, gpu=bool(gpus)))
    env.update({str(k): "" if v is None else str(v) for k, v in spec.env.items()})
    for name in SCRUBBED_ENV:
        env.pop(name, None)
    env["DET_MASTER"] = master_url
    env["DET_AGENT_ID"] = agent_id
    env.setdefault("DET_ALLOCATION_ID", spec.allocation_id)
    visible = range(len(gpus)) if layout.renumber_gpus else gpus
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in visible)
    if gpus:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's numbering then matches NVML's
    elif layout.renumber_gpus:
        env["NVIDIA_VISIBLE_DEVICES"] = "void"  # no GPU in a container that asked for none
    env["PYTHONUNBUFFERED"] = "1"
    if layout.home is not None:  # the agent's HOME is not the task's to write (or read)
        env["HOME"] = layout.home
        for name in ("USER", "LOGNAME"):
            if layout.user:
                env[name] = layout.user
            else:
                env.pop(name, None)
    if layout.path_first:
        env["PATH"] = prepend(env.get("PATH") or os.defpath, layout.path_first)
    env["PYTHONPATH"] = prepend(
        env.get("PYTHONPATH") or layout.default_pythonpath, layout.code_dirs
    )
    return env
