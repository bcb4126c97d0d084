"""Determined 0.38's command, notebook and shell configs (pure): which keys detlab acts on, and
the ones it accepts without acting on, each with the reason (a warning in the answer, never a
silent drop). Keys no Determined config has stay errors naming the key.

`split` returns the config with only the keys detlab acts on, and the warnings for the rest.
A key set to null, {}, [] or Determined's default (as its full config dumps have them) warns
about nothing.
"""

from __future__ import annotations

from typing import Any

from detlab.expconf import ConfigError
from detlab.expconf._sections import parse_bind_mounts
from detlab.expconf._slurm import parse_slurm_section
from master.errors import BadRequest
from master.states import TaskType

UNHONOURED: dict[str, str] = {
    "bind_mounts": "a TensorBoard mounts its sources' checkpoint storage itself",
    "work_dir": "the task starts in its own work directory on the agent",
    "debug": "Determined's debug mode is not provided",
    "pbs": "detlab does not submit to PBS",
    "slurm": "a TensorBoard is started with the Slurm resource manager's options only",
    "tensorboard_args": "TensorBoard runs with detlab's arguments (docs/tensorboard.md)",
    "environment.pod_spec": "a task's pod_spec is not applied (a trial's is, on Kubernetes)",
    "environment.ports": "proxies to other ports are not provided yet",
    "environment.proxy_ports": "proxies to other ports are not provided yet",
    "environment.add_capabilities": "a task's container keeps Docker's default capabilities",
    "environment.drop_capabilities": "a task's container keeps Docker's default capabilities",
    "resources.weight": "fair-share weights are per resource pool here",
    "resources.max_slots": "a task's slots are fixed",
    "resources.shm_size": "a task's container gets Docker's default shared memory size",
    "resources.devices": "devices are not passed to containers",
    "resources.is_single_node": "a task's slots are on one agent when they fit",
    "resources.native_parallel": "native parallelism was removed from Determined",
}
# Per task type: keys acted on, and keys accepted with a warning of their own.
_HONOURED: dict[TaskType, set[str]] = {
    TaskType.COMMAND: {
        "description", "entrypoint", "resources", "environment", "bind_mounts", "slurm",
    },
    TaskType.NOTEBOOK: {
        "description", "resources", "environment", "bind_mounts", "idle_timeout",
        "notebook_idle_type", "slurm",
    },
    TaskType.SHELL: {
        "description", "resources", "environment", "bind_mounts", "idle_timeout", "slurm",
    },
    TaskType.TENSORBOARD: {"description", "resources", "environment", "idle_timeout"},
}  # fmt: skip
_OWN_WARNINGS: dict[TaskType, dict[str, str]] = {
    TaskType.COMMAND: {
        "idle_timeout": "a command runs until its process ends",
        "notebook_idle_type": "only notebooks have kernels",
    },
    TaskType.NOTEBOOK: {"entrypoint": "the master starts JupyterLab itself"},
    TaskType.SHELL: {
        "entrypoint": "the master starts the shell server itself",
        "notebook_idle_type": "only notebooks have kernels",
    },
    TaskType.TENSORBOARD: {
        "entrypoint": "the master starts TensorBoard itself",
        "notebook_idle_type": "only notebooks have kernels",
    },
}
_RESOURCES = {"slots", "priority", "resource_pool", "preemptible"}
# In a container (Docker agents, Kubernetes) as for a trial; a process-runtime agent runs the
# task with its own interpreter, as it does a trial, whatever the image.
_ENVIRONMENT = {"environment_variables", "image", "force_pull_image", "registry_auth"}


# Determined's defaults: a full config dump carries them, and they ask for nothing.
_DEFAULTS: dict[str, Any] = {
    "debug": False,
    "environment.force_pull_image": False,
    "resources.weight": 1,
}


def _set(path: str, value: Any) -> bool:
    return value is not None and value != {} and value != [] and value != _DEFAULTS.get(path)


def split(config: dict[str, Any], kind: TaskType) -> tuple[dict[str, Any], list[str]]:
    """(the keys acted on, warnings naming each accepted key that is not)."""
    honoured = _HONOURED[kind]
    own = _OWN_WARNINGS[kind]
    kept: dict[str, Any] = {}
    warnings: list[str] = []
    for key, value in config.items():
        if key == "slurm" and key in honoured:
            # Checked here (a typo is a 400 naming it); applied on a Slurm pool only.
            try:
                kept[key] = parse_slurm_section(value)
            except ConfigError as e:
                raise BadRequest(str(e), path=f"config.{e.path}") from None
        elif key in honoured and key not in ("resources", "environment"):
            kept[key] = value
        elif key in ("resources", "environment"):
            kept[key], more = _section(
                key, value, _RESOURCES if key == "resources" else _ENVIRONMENT
            )
            warnings += more
        elif key in own or key in UNHONOURED:
            if key == "bind_mounts":
                try:
                    parse_bind_mounts(value)  # a malformed one is still an error
                except ConfigError as e:
                    raise BadRequest(str(e), path=f"config.{e.path}") from None
            if _set(key, value):
                warnings.append(f"{key}: ignored: {own.get(key) or UNHONOURED[key]}")
        else:
            raise BadRequest(f"unknown key {key!r}", path=f"config.{key}")
    return kept, warnings


def task_slurm(config: dict[str, Any], pool: str) -> tuple[dict[str, Any] | None, list[str]]:
    """A split config's `slurm:` section for the task's spec, and the warning when its pool is
    not a Slurm partition (where it is ignored)."""
    from master.rm.registry import slurm_warnings

    section = config.get("slurm")
    return section, slurm_warnings(pool, section)


def _section(name: str, raw: Any, honoured: set[str]) -> tuple[Any, list[str]]:
    if not isinstance(raw, dict):
        return raw, []  # the section's own parser names the problem
    kept, warnings = {}, []
    for key, value in raw.items():
        path = f"{name}.{key}"
        if key in honoured:
            kept[key] = value
        elif path in UNHONOURED:
            if _set(path, value):
                warnings.append(f"{path}: ignored: {UNHONOURED[path]}")
        else:
            raise BadRequest(f"unknown key {key!r}", path=f"config.{path}")
    return kept, warnings
