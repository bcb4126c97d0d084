"""What detlab says when Slurm itself is unwell (pure: no I/O): a partition whose nodes are
down or drained, a job pending because of them, munge (Slurm's authentication) failing, and an
`sbatch` that failed for a reason that passes (master/rm/backoff.py: how long to wait then).

Each becomes one line a Slurm admin recognises, instead of Slurm's raw words repeated on
every tick (master/rm/slurm.py logs a munge failure once per outage)."""

from __future__ import annotations

from dataclasses import dataclass, field

from master.rm.slurm_cli import PartitionRow

# Slurm's pending reasons that mean "the nodes this job could use are down or drained".
_NODE_REASONS = ("ReqNodeNotAvail", "NodeDown", "Nodes_required_for_job_are_DOWN")


def pool_note(row: PartitionRow | None, partition: str) -> str | None:
    """The pool's message when its partition is missing, down, or has nodes that take no job."""
    if row is None:
        return f"Slurm has no partition {partition}"
    if not row.up:
        return f"Slurm partition {partition} is down"
    if row.unusable == 0:
        return None
    states = ", ".join(sorted(set(row.unusable_states)))
    if row.unusable == row.nodes:
        return f"every node of Slurm partition {partition} is down or drained ({states})"
    return (
        f"{row.unusable} of {row.nodes} nodes of Slurm partition {partition} "
        f"are down or drained ({states})"
    )


def pending_reason(reason: str, note: str | None) -> str | None:
    """Slurm's pending reason as detlab's queue reason; a reason about unavailable nodes says
    so in detlab's words too (with the pool's note when there is one)."""
    reason = reason.strip()
    if not reason or reason in ("None", "(null)"):
        return None
    if any(k in reason for k in _NODE_REASONS) or (note and "down or drained" in note):
        why = note or "the nodes it needs are down or drained"
        return f"waiting in Slurm: {why} (Slurm: {reason})"
    return f"waiting in Slurm: {reason}"


def munge_failure(stderr: str) -> str | None:
    """One line when a Slurm command failed because munge did (munged down, a wrong key, an
    unreachable socket, clocks apart); None for any other failure."""
    text = stderr.lower()
    if "munge" not in text and "authentication credential" not in text:
        return None
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    # Slurm's first munge line is advice ("If munged is up, restart with --num-threads=10");
    # the line that says what failed is the one wanted.
    first = next((ln for ln in lines if "munge" in ln.lower() and "fail" in ln.lower()), "")
    first = first or next((ln for ln in lines if "munge" in ln.lower()), lines[0] if lines else "")
    return (
        "Slurm's authentication (munge) fails: is munged running with the cluster's key on "
        f"the master's host? Slurm said: {first}"
    )


# sbatch's failures that say Slurm did not answer, not that the job is wrong: a retry can work.
_TRANSIENT = (
    "Unable to contact slurm controller",
    "Socket timed out on send/recv operation",
    "Zero Bytes were transmitted or received",
    "Slurm temporarily unable to accept job",
    "Resource temporarily unavailable",
    "Connection refused",
    "Transport endpoint is not connected",
    "did not answer within",  # run_cli's own timeout
)


def transient_failure(stderr: str) -> bool:
    """True when sbatch failed because Slurm (or munge) did not answer: the allocation is
    requeued without spending the trial's restarts."""
    return munge_failure(stderr) is not None or any(t in stderr for t in _TRANSIENT)


@dataclass
class Health:
    """What one Slurm resource manager remembers of Slurm's health between passes (kept with
    the app: an RM object lives for one call)."""

    # Pool -> what is wrong with its partition (down or drained nodes), from the last sinfo.
    pool_notes: dict[str, str] = field(default_factory=dict)
    # Pool -> its partition as the last sinfo showed it (how many nodes, how big): how many
    # nodes a trial spans is decided from it when the trial is submitted.
    partitions: dict[str, PartitionRow] = field(default_factory=dict)
    failing: str | None = None  # the Slurm failure logged, until a command works again
    storage_ok: bool = False  # a master that is not root can hand job directories over
    # After an sbatch that failed because Slurm did not answer: submissions wait until
    # `hold_until` (time.monotonic), `backoff_s` doubling while the failures go on.
    backoff_s: float | None = None
    hold_until: float = 0.0
