"""The `slurm:` section of an experiment or task config, in Determined 0.38's form (pure).

    slurm: {slots_per_node: 4, gpu_type: a100, sbatch_args: ["--time=2:00:00", "--mem=16G"]}

Honoured when the pool is a Slurm partition (master/rm/slurm_cli.py adds it to `sbatch`),
ignored with a warning elsewhere. `sbatch_args` go on sbatch's command line (no shell), so a
quote or `;` is only text; what they may not do is take over the options detlab owns: the
job's identity (name, comment: how the master finds it), its shape (partition, nodes, tasks,
GPUs/CPUs: the slots the scheduler counted), where its output and exit status go, its signal
and requeue policy, its user and its environment (`--export=NONE`: the master's environment
holds the database password).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from detlab.expconf._check import describe, get_int, get_str, item, join, mapping
from detlab.expconf._errors import ConfigError

SLURM_KEYS = ("slots_per_node", "gpu_type", "sbatch_args")
MAX_SBATCH_ARGS = 64
MAX_SBATCH_ARG = 1024
MAX_SLOTS_PER_NODE = 1024
# A GRES type is one word: a ':' or ',' would add another GRES to the request.
GPU_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")

# sbatch's long options detlab sets itself or that would break how it tracks the job, and why.
OWNED_LONG: dict[str, str] = {
    "partition": "the pool is the partition (resources.resource_pool)",
    "nodes": "detlab decides the nodes from the slots (use slurm.slots_per_node)",
    "ntasks": "detlab runs one launcher per node",
    "ntasks-per-node": "detlab runs one launcher per node",
    "gres": "the GPUs are the slots (resources.slots_per_trial; slurm.gpu_type for a type)",
    "gpus": "the GPUs are the slots (resources.slots_per_trial; slurm.gpu_type for a type)",
    "gpus-per-node": "the GPUs are the slots (use slurm.slots_per_node)",
    "gpus-per-task": "the GPUs are the slots",
    "gpus-per-socket": "the GPUs are the slots",
    "tres-per-task": "the GPUs are the slots",
    "cpus-per-task": "a CPU pool's slots are the task's CPUs",
    "job-name": "the master finds its jobs by name and comment",
    "comment": "the master finds its jobs by name and comment",
    "output": "the master ships the job's output file into the task's logs",
    "error": "the master ships the job's output file into the task's logs",
    "open-mode": "the output file is appended to, so shipped offsets stay valid",
    "chdir": "the job runs in its job directory",
    "signal": "USR1 60 s before the end is the trial's preemption notice",
    "requeue": "detlab requeues trials itself, from their checkpoints",
    "no-requeue": "detlab requeues trials itself, from their checkpoints",
    "uid": "the job runs as the detlab user's linked Unix user",
    "gid": "the job runs as the detlab user's linked Unix user",
    "export": "the job never inherits the master's environment",
    "export-file": "the job never inherits the master's environment",
    "parsable": "the master reads the job id from sbatch's output",
    "wrap": "the batch script is detlab's",
    "array": "one allocation is one job",
    "clusters": "the master follows jobs on its own cluster only",
    "wait": "the master does not block on a job",
    "test-only": "the job must be submitted",
    # A master running as root submits through --uid: sbatch runs as root, and Slurm grants
    # root what it grants no user.
    "priority": "only Slurm's administrators set a job's priority (the master may submit as root)",
    "nice": "only Slurm's administrators lower a job's nice value (the master may submit as root)",
    "get-user-env": "only root may use it (the master may submit as root)",
    "nodefile": "sbatch would read that file as the master's user (possibly root)",
    "bbf": "sbatch would read that file as the master's user (possibly root)",
    "help": "the job must be submitted",
    "usage": "the job must be submitted",
    "version": "the job must be submitted",
}
# Their short forms (sbatch's getopt letters).
OWNED_SHORT: dict[str, str] = {
    "p": "partition",
    "N": "nodes",
    "n": "ntasks",
    "G": "gpus",
    "c": "cpus-per-task",
    "J": "job-name",
    "o": "output",
    "e": "error",
    "D": "chdir",
    "a": "array",
    "M": "clusters",
    "W": "wait",
    "h": "help",
    "V": "version",
}
# sbatch's short options that take no value (quiet, hold, no-kill, overcommit, oversubscribe,
# verbose): a bundle goes on after them.
_FLAGS = frozenset("QHkOsv")


def owned_option(arg: str) -> str | None:
    """The owned long option `arg` sets (sbatch also takes any unambiguous prefix of a long
    option, so `--part=x` is `--partition`), or None."""
    if arg.startswith("--"):
        name = arg[2:].split("=", 1)[0]
        if name in OWNED_LONG:
            return name
        # A prefix sbatch would expand to an owned option (`--j=x` is `--job-name`); one that is
        # also a prefix of other options is ambiguous to sbatch, refused here all the same.
        hit = sorted(o for o in OWNED_LONG if o.startswith(name))
        return hit[0] if hit else None
    # Short flags bundle (`-Hp x` is `-H -p x`): every letter up to the first that takes a
    # value is an option of its own.
    for letter in arg[1:]:
        if letter in OWNED_SHORT:
            return OWNED_SHORT[letter]
        if letter not in _FLAGS:
            return None
    return None


def check_sbatch_arg(arg: Any, path: str) -> str:
    """One sbatch argument: one option per item, its value after `=` or attached."""
    if not isinstance(arg, str):
        raise ConfigError(path, f"expected a string, got {describe(arg)}")
    if len(arg) > MAX_SBATCH_ARG:
        raise ConfigError(path, f"at most {MAX_SBATCH_ARG} characters")
    if "\0" in arg:
        raise ConfigError(path, "must not contain a NUL character")
    if not arg.startswith("-") or arg in ("-", "--"):
        # A bare word would be read as the batch script, replacing detlab's.
        raise ConfigError(
            path,
            f"{arg!r} is not an option: give one option per item with its value after '=' "
            "(--time=1:00:00) or attached (-t60)",
        )
    owned = owned_option(arg)
    if owned is not None:
        raise ConfigError(path, f"{arg!r} sets --{owned}, which detlab owns: {OWNED_LONG[owned]}")
    return arg


def parse_slurm_section(raw: Any, path: str = "slurm") -> dict[str, Any]:
    """The section, checked, with every key present (None/[] when unset)."""
    if raw is None:
        raw = {}
    fields = mapping(raw, path, SLURM_KEYS)
    args = fields.get("sbatch_args")
    if args is None:
        args = []
    if not isinstance(args, list):
        raise ConfigError(join(path, "sbatch_args"), f"expected a list, got {describe(args)}")
    if len(args) > MAX_SBATCH_ARGS:
        raise ConfigError(join(path, "sbatch_args"), f"at most {MAX_SBATCH_ARGS} arguments")
    gpu_type = get_str(fields, "gpu_type", path, None, max_len=64)
    if gpu_type is not None and not GPU_TYPE.fullmatch(gpu_type):
        raise ConfigError(
            join(path, "gpu_type"),
            f"{gpu_type!r} is not a GRES type name (letters, digits, '_', '.', '-')",
        )
    return {
        "slots_per_node": get_int(
            fields, "slots_per_node", path, None, minimum=1, limit=MAX_SLOTS_PER_NODE
        ),
        "gpu_type": gpu_type,
        "sbatch_args": [
            check_sbatch_arg(a, item(join(path, "sbatch_args"), i)) for i, a in enumerate(args)
        ],
    }


def section_set(section: Mapping[str, Any] | None) -> bool:
    """Whether the (parsed) section asks for anything."""
    if not section:
        return False
    return bool(
        section.get("slots_per_node") or section.get("gpu_type") or section.get("sbatch_args")
    )


def ignored_warning(pool: str) -> str:
    """The warning for a section set on a pool that is not a Slurm partition."""
    return (
        f"slurm is accepted but ignored: resource pool {pool!r} is not a Slurm partition "
        "(the section applies only to pools of a Slurm resource manager)"
    )
