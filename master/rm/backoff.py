"""How long a resource manager holds its submissions after its backend refused one for a reason
that passes (Slurm's controller not answering sbatch, a Kubernetes Secret or Job the API server
would not create). Pure: no I/O."""

from __future__ import annotations

BACKOFF_FIRST_S = 5.0
BACKOFF_MAX_S = 60.0


def next_backoff(previous_s: float | None) -> float:
    """5 s, doubling while the failures go on, at most 60 s."""
    if previous_s is None:
        return BACKOFF_FIRST_S
    return min(BACKOFF_MAX_S, previous_s * 2)
