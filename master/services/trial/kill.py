"""`det trial kill ID` (Determined's POST /api/v1/trials/ID/kill): one trial ends CANCELED, its
experiment goes on. The searcher hears of it as a user-canceled early exit (`USER_CANCELED`),
so a search moves on to its next trial as Determined's does.
"""

from __future__ import annotations

from master.context import state_lock
from master.errors import BadRequest
from master.models import Trial
from master.notify import hub, logs_key, trial_key
from master.rm.registry import resource_manager
from master.searcher import ExitedReason
from master.services.experiment.experiments import maybe_finish
from master.services.experiment.searcher import searcher_exited_early, update_progress
from master.services.task.allocations import live_allocation
from master.services.transitions import set_trial_state
from master.services.trial.logs import write_master_line
from master.states import State, is_terminal

WHY = "killed by the user"


def kill_trial(trial_id: int) -> Trial:
    """Kill trial `trial_id`. A running one is killed at once and ends CANCELED when its process
    is gone (`trial_exits.Outcome.KILLED`); one with no process ends CANCELED now. An ended
    trial is left as it is."""
    from master.db import db
    from master.services.trial.trials import get_trial

    with state_lock():
        trial = get_trial(trial_id)
        exp = trial.experiment
        if exp.conf.unmanaged:
            raise BadRequest(
                f"trial {trial_id} is unmanaged: its script runs where its user started it "
                "(stop that process; its exit ends the trial)",
                path="trial_id",
            )
        if is_terminal(trial.state):
            return trial
        alloc = live_allocation(trial.id)
        if alloc is not None:
            # The process's exit decides the outcome: KILLED (kill_requested) -> CANCELED.
            resource_manager(exp.resource_pool).kill(alloc)
            write_master_line(trial.id, alloc, WHY)
        if alloc is None or trial.state == State.PAUSED:
            # Nothing will report an exit that means "killed" (no process, or a pausing one
            # whose exit reads as paused): it ends now.
            set_trial_state(trial, State.CANCELED, WHY)
            if exp.state in (State.ACTIVE, State.PAUSED):
                searcher_exited_early(exp, trial, ExitedReason.USER_CANCELED)
            maybe_finish(exp)
            update_progress(exp)
        db.session.commit()
    hub().notify(trial_key(trial.id), logs_key(trial.id))
    return trial
