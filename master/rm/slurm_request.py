"""What a task asks a Slurm partition for: its slots and its `slurm:` section (from the
database: a trial's come from its experiment's config, a command's from its own spec)."""

from __future__ import annotations

from typing import Any

from master.db import db
from master.models import Task, Trial


def slurm_section(task: Task) -> dict[str, Any]:
    """The task's `slurm:` section: its experiment's for a trial, its own for a command."""
    if task.trial_id is not None:
        trial = db.session.get(Trial, task.trial_id)
        assert trial is not None
        return trial.experiment.conf.slurm.to_json()
    return dict((task.spec or {}).get("slurm") or {})


def slots_of(task: Task) -> int:
    if task.trial_id is not None:
        trial = db.session.get(Trial, task.trial_id)
        assert trial is not None
        return int(trial.experiment.conf.resources.slots_per_trial)
    return int(task.slots or 0)
