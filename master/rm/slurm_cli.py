"""The Slurm command lines detlab runs and what their output means (pure: no I/O).

Fixed `-o` formats rather than `--json`, whose schema changes between Slurm releases. Every
detlab job carries its allocation id in its comment (`detlab:<allocation id>`) and its task id
in its name (`det-<task id>`), so one bulk `squeue` per tick finds them all.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from enum import StrEnum

from detlab.constants import SLURM_NOTICE_FILE
from master.rm.slurm_config import SlurmConfig
from master.rm.slurm_gang import Gang, gang_sbatch_args, srun_prefix

COMMENT_PREFIX = "detlab:"
NAME_PREFIX = "det-"
# %i job id, %T long state, %r reason, %k comment (last: it is the only free-text field of ours)
SQUEUE_FORMAT = "%i|%T|%r|%k"
SQUEUE_ARGV = ("squeue", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}")
# %R partition, %a availability, %D nodes, %c CPUs per node, %G generic resources, %t the
# nodes' state (sinfo prints one line per partition and state, so down nodes are counted apart)
SINFO_ARGV = ("sinfo", "--noheader", "--format=%R|%a|%D|%c|%G|%t")
OUTPUT_FILE = "output.log"
STATUS_FILE = "exit_status"
SPEC_FILE = "spec.json"
SCRIPT_FILE = "job.sh"
NOTICE_FILE = SLURM_NOTICE_FILE  # the launcher's mark of Slurm's USR1
# The trial gets the preemption notice this long before Slurm's time limit or preemption kill.
SIGNAL_LEAD_S = 60


class JobPhase(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    ENDED = "ended"


_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD"}
_RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}


def phase_of(state: str) -> JobPhase:
    """Slurm's long job state as pending, running or ended; states this Slurm release does not
    name are ended (FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, ...)."""
    state = state.strip().upper().split()[0] if state.strip() else ""
    if state in _PENDING:
        return JobPhase.PENDING
    if state in _RUNNING:
        return JobPhase.RUNNING
    return JobPhase.ENDED


@dataclass(frozen=True)
class JobRow:
    job_id: str
    state: str
    reason: str
    allocation_id: str

    @property
    def phase(self) -> JobPhase:
        return phase_of(self.state)


def parse_squeue(text: str) -> dict[str, JobRow]:
    """Allocation id -> its newest job row, for detlab's jobs only (others' jobs are skipped)."""
    out: dict[str, JobRow] = {}
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) != 4 or not parts[3].startswith(COMMENT_PREFIX):
            continue
        job_id, state, reason, comment = (p.strip() for p in parts)
        alloc = comment[len(COMMENT_PREFIX) :]
        row = JobRow(job_id=job_id, state=state, reason=reason, allocation_id=alloc)
        prev = out.get(alloc)
        if prev is None or _job_number(job_id) >= _job_number(prev.job_id):
            out[alloc] = row
    return out


def _job_number(job_id: str) -> int:
    m = re.match(r"\d+", job_id)
    return int(m.group()) if m else -1


def pending_reason(reason: str) -> str | None:
    """Slurm's pending reason as detlab's queue reason ("None" and empty mean no reason)."""
    reason = reason.strip()
    if not reason or reason in ("None", "(null)"):
        return None
    return f"waiting in Slurm: {reason}"


@dataclass(frozen=True)
class PartitionRow:
    partition: str
    up: bool
    nodes: int
    # Over all its nodes, down ones too: Slurm queues a job until they are back, so a drained
    # node must not turn a request into "can never fit".
    cpus: int
    gpus: int
    unusable: int = 0  # nodes down, drained, draining or failing (they take no new job)
    unusable_states: tuple[str, ...] = ()
    # The largest node's CPUs and GPUs: a trial needing more slots than that spans nodes.
    node_cpus: int = 0
    node_gpus: int = 0


def gpus_in_gres(gres: str) -> int:
    """GPUs per node in sinfo's %G (`gpu:2`, `gpu:a100:4(S:0-1)`, `gpu:2,shard:8`)."""
    total = 0
    for item in gres.split(","):
        item = re.sub(r"\(.*?\)", "", item.strip())
        fields = item.split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def parse_sinfo(text: str) -> dict[str, PartitionRow]:
    """Partition -> its capacity on the nodes that take jobs; a partition on several sinfo
    lines (nodes in different configurations or states) sums its lines. The default
    partition's trailing `*` is dropped. Down or drained nodes are counted in `unusable` with
    their states, for the pool's message."""
    out: dict[str, PartitionRow] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) not in (5, 6) or not parts[2].isdigit():
            continue
        name = parts[0].rstrip("*")
        nodes = int(parts[2])
        state = parts[5] if len(parts) == 6 else ""
        bad = node_state_unusable(state)
        node_cpus = int(re.sub(r"\D.*", "", parts[3]) or 0)
        node_gpus = gpus_in_gres(parts[4])
        cpus, gpus = nodes * node_cpus, nodes * node_gpus
        states: tuple[str, ...] = (state,) if bad else ()
        unusable = nodes if bad else 0
        prev = out.get(name)
        if prev is not None:
            nodes, cpus, gpus = prev.nodes + nodes, prev.cpus + cpus, prev.gpus + gpus
            unusable, states = prev.unusable + unusable, prev.unusable_states + states
            node_cpus, node_gpus = max(prev.node_cpus, node_cpus), max(prev.node_gpus, node_gpus)
        out[name] = PartitionRow(
            name, parts[1] == "up", nodes, cpus, gpus, unusable, states, node_cpus, node_gpus
        )
    return out


# sinfo's short node states that take no new job; a trailing `*` means not responding.
_UNUSABLE = {"down", "drain", "drained", "drng", "draining", "fail", "failg", "maint", "inval"}


def node_state_unusable(state: str) -> bool:
    state = state.strip().lower()
    if not state:
        return False
    if state.endswith("*"):
        return True
    return state.rstrip("~#!%$@^-+") in _UNUSABLE


def partition_slots(row: PartitionRow, slot_type: str) -> int:
    """A partition's detlab slots: its GPUs, or its CPUs for a CPU pool."""
    return row.cpus if slot_type == "cpu" else row.gpus


def node_slots(row: PartitionRow, slot_type: str) -> int:
    """The most detlab slots one node of the partition has."""
    return row.node_cpus if slot_type == "cpu" else row.node_gpus


@dataclass(frozen=True)
class Submission:
    task_id: str
    allocation_id: str
    partition: str
    slots: int
    job_dir: str
    gang: Gang | None = None  # several nodes (master/rm/slurm_gang.py); None: one node
    # The experiment's (or task's) `slurm:` section (detlab/expconf/_slurm.py, checked there).
    gpu_type: str | None = None
    sbatch_args: tuple[str, ...] = ()


def resource_args(
    cfg: SlurmConfig, slot_type: str, slots: int, gpu_type: str | None = None
) -> list[str]:
    """How a request of `slots` asks Slurm for them: GPUs through gres or TRES (of the
    experiment's `slurm.gpu_type` when it names one), CPUs as CPUs of the one task."""
    if slots <= 0:
        return ["--cpus-per-task=1"]
    if slot_type == "cpu":
        return [f"--cpus-per-task={slots}"]
    typed = f"{gpu_type}:{slots}" if gpu_type else str(slots)
    if cfg.gres_supported:
        return [f"--gres=gpu:{typed}"]
    return [f"--gpus={typed}"]


@dataclass(frozen=True)
class JobUser:
    """Whom the job runs as: the detlab user's linked Unix user (None: the master's user)."""

    name: str | None = None
    uid: int | None = None
    gid: int | None = None


def sbatch_argv(
    cfg: SlurmConfig, sub: Submission, user: JobUser | None = None, as_root: bool = False
) -> list[str]:
    """The `sbatch` command line of one allocation (its script is in its job directory). The
    job runs as the linked Unix user: through `sudo -u` when the master may, else through
    sbatch's `--uid`/`--gid` when the master is root (Slurm allows them to root only)."""
    user = user or JobUser()
    slot_type = cfg.slot_type_of(sub.partition)
    if sub.gang is not None and sub.gang.nodes > 1:
        shape = gang_sbatch_args(sub.gang, slot_type, cfg.gres_supported, sub.gpu_type)
    else:
        shape = ["--nodes=1", "--ntasks=1", *resource_args(cfg, slot_type, sub.slots, sub.gpu_type)]
    by_id = (
        [f"--uid={user.uid}", f"--gid={user.gid if user.gid is not None else user.uid}"]
        if as_root and not cfg.sudo_authorized and user.uid is not None
        else []
    )
    argv = [
        "sbatch",
        "--parsable",
        # The user's options first: sbatch takes an option's last value, so detlab's own win
        # even over one the section's check missed.
        *sub.sbatch_args,
        f"--job-name={NAME_PREFIX}{sub.task_id}",
        f"--comment={COMMENT_PREFIX}{sub.allocation_id}",
        f"--partition={sub.partition}",
        *shape,
        # The job starts from the user's login environment, never the master's (which may
        # hold the database password); the launcher adds the task's own variables.
        "--export=NONE",
        # detlab requeues its trials itself, from their checkpoints; a job that Slurm requeued
        # would run a second copy of an allocation the master already ended.
        "--no-requeue",
        # Logs are kept whole across restarts (a truncated file would lose shipped offsets).
        "--open-mode=append",
        f"--output={sub.job_dir}/{OUTPUT_FILE}",
        f"--chdir={sub.job_dir}",
        f"--signal=B:USR1@{SIGNAL_LEAD_S}",
        *by_id,
        f"{sub.job_dir}/{SCRIPT_FILE}",
    ]
    return as_user(cfg, user.name) + argv


def as_user(cfg: SlurmConfig, unix_user: str | None) -> list[str]:
    """The prefix that runs a Slurm command as the job's user: `sudo -u` when the master may."""
    user = unix_user or cfg.user_name
    if cfg.sudo_authorized and user:
        return ["sudo", "-n", "-u", user]
    return []


def job_script(
    python: str,
    pythonpath: str,
    job_dir: str,
    path_first: str | None,
    nodes: int = 1,
    container: str = "",
    preamble: str = "",
) -> str:
    """The batch script: run the launcher (through `srun`, one per node, for a gang of
    `nodes`), then write its exit status where the master reads it (so nothing depends on
    sacct, which needs slurmdbd). Written to a temporary name and renamed, the status file is
    never seen half-written. `container` (shell text, master/rm/slurm_podman.py) runs the
    launcher in a container, `python` then being the image's; `preamble` defines what it uses."""
    q = shlex.quote
    srun = "".join(f"{q(a)} " for a in srun_prefix(nodes))
    path = ":".join(p for p in (path_first, "/usr/local/bin:/usr/bin:/bin") if p)
    return f"""#!/bin/bash
# detlab: one allocation as a Slurm job (written by the master; see docs/slurm.md)
export PATH={q(path)}
export PYTHONPATH={q(pythonpath)}
{preamble}# USR1 (Slurm's preemption notice) and TERM go to the launcher, which acts on them (srun
# passes them on to the launcher of every node).
{srun}{container}{q(python)} -m agent.slurm_job {q(job_dir + "/" + SPEC_FILE)} &
child=$!
trap 'kill -USR1 $child 2>/dev/null' USR1
trap 'kill -TERM $child 2>/dev/null' TERM
while true; do
  wait $child; code=$?
  kill -0 $child 2>/dev/null || break
done
wait $child 2>/dev/null; last=$?
[ "$last" -ne 127 ] && code=$last
echo "$code" > {q(job_dir + "/" + STATUS_FILE + ".tmp")}
mv -f {q(job_dir + "/" + STATUS_FILE + ".tmp")} {q(job_dir + "/" + STATUS_FILE)}
exit "$code"
"""


def parse_status(text: str) -> int | None:
    """The exit status file's code, None while it is not (fully) there."""
    text = text.strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def parse_job_id(stdout: str) -> str:
    """`sbatch --parsable` prints `<id>` or `<id>;<cluster>`."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    job_id = first.split(";")[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"sbatch printed no job id: {stdout.strip()!r}")
    return job_id


# sbatch's refusals that no waiting can help: the request exceeds what the partition has.
_NEVER_FITS = (
    "Requested node configuration is not available",
    "Node count specification invalid",
    "More processors requested than permitted",
    "Invalid generic resource (gres) specification",
    "Requested partition configuration not available now",
    "Invalid partition name specified",
    "Invalid Trackable RESource (TRES) specification",
)


def refusal_never_fits(stderr: str) -> bool:
    return any(text in stderr for text in _NEVER_FITS)


def slurm_words(stderr: str) -> str:
    """sbatch's own message, without the `sbatch: error: ` prefixes."""
    lines = [re.sub(r"^sbatch: error: ", "", ln).strip() for ln in stderr.splitlines()]
    return "; ".join(ln for ln in lines if ln) or "sbatch failed without a message"


def ended_without_status(row: JobRow | None, job_id: str) -> str:
    """Why a job that left no exit status ended, in Slurm's words."""
    if row is None:
        return f"Slurm job {job_id} vanished from the queue without an exit status"
    why = f" ({row.reason})" if row.reason and row.reason != "None" else ""
    return f"Slurm job {job_id} ended {row.state}{why} without an exit status"
