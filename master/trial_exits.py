"""What an allocation's end means for its trial (pure: no I/O).

`decide` turns the facts about one ended allocation into one `Outcome`;
`master.services.trial.trials.allocation_exited` gathers the facts and applies the outcome
through the trial's state machine. Every rule of how a trial ends lives here, in order, and is
tested alone (tests/unit/test_trial_exits.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from detlab.protocol import ExitCause
from master.states import STOPPING_TO_TERMINAL, State


class Outcome(Enum):
    ALREADY_ENDED = "already_ended"  # a late report about an ended trial: nothing changes
    STOPPED = "stopped"  # the trial was stopping: it reaches its terminal state
    PAUSED = "paused"  # the trial was paused: it waits to be activated
    INVALID_HP = "invalid_hp"  # the script said its hyperparameters are invalid: COMPLETED
    COMPLETED = "completed"  # done: the searcher closed it and it finished its work
    WAIT_FOR_SEARCHER = "wait_for_searcher"  # did its work; the searcher may want more
    PREEMPTED = "preempted"  # asked to make room: it queues again from its checkpoint
    REQUEUE = "requeue"  # not the trial's fault: it queues again without spending a restart
    # Determined 0.38: a process that exits 0 is COMPLETED, whether or not it used searcher
    # operations; the searcher takes its metric from the reported validations.
    EXITED_OK = "exited_ok"
    KILLED = "killed"  # the user killed it: CANCELED
    RESTART = "restart"  # failed; it runs again from its latest checkpoint
    FAILED = "failed"  # failed and out of restarts (or retrying cannot help): ERROR


@dataclass(frozen=True)
class ExitFacts:
    trial_state: State
    exit_code: int | None
    error: str | None
    cause: ExitCause | None
    invalid_hp: bool  # the trial reported `InvalidHP` before exiting
    closing: bool  # the searcher closed the trial
    trained_enough: bool  # searcher_completed >= searcher_target
    experiment_completing: bool  # the experiment is STOPPING_COMPLETED
    preempt_requested: bool
    kill_requested: bool
    restarts: int  # restarts used before this exit
    max_restarts: int
    # The process was last told the searcher had no work for it (so it exited). A promotion
    # that raised the target after that answer, but before the exit was seen, is still owed:
    # on Kubernetes a pod's end reaches the master late (watch, apply thread, a master
    # restart), and reading that exit as "exited 0 before its operation" swallowed promotions.
    out_of_work: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.error


def decide(f: ExitFacts) -> Outcome:
    if f.trial_state in STOPPING_TO_TERMINAL:
        return Outcome.STOPPED
    if f.trial_state == State.PAUSED:
        return Outcome.PAUSED
    if f.trial_state != State.ACTIVE:
        return Outcome.ALREADY_ENDED
    if f.kill_requested:
        # The user's kill is the last word, however the process ended: a script that hears
        # the kill as "preempt" (the preemption poll answers yes), checkpoints and exits 0
        # before the SIGTERM lands, or an agent that shuts down meanwhile, must not complete
        # or requeue a trial its user killed (Determined: CANCELED).
        return Outcome.KILLED
    if f.invalid_hp and (f.ok or f.exit_code is not None):
        return Outcome.INVALID_HP
    if f.closing and f.trained_enough and (f.ok or f.preempt_requested):
        # Closed by the searcher (done, or stopped early and killed past the timeout).
        return Outcome.COMPLETED
    if f.ok and (f.trained_enough or f.out_of_work):
        if f.closing or f.experiment_completing:
            return Outcome.COMPLETED
        return Outcome.WAIT_FOR_SEARCHER
    if f.preempt_requested and (f.ok or f.cause == ExitCause.PREEMPTION_TIMEOUT):
        return Outcome.PREEMPTED
    if f.cause is not None and not f.cause.trials_fault:
        return Outcome.REQUEUE
    if f.ok:
        return Outcome.EXITED_OK
    budget = f.max_restarts
    if f.cause is not None and not f.cause.retryable:
        budget = min(budget, f.restarts)  # retrying cannot help: fail now
    if f.restarts + 1 > budget:
        return Outcome.FAILED
    return Outcome.RESTART


def final_state(outcome: Outcome, trial_state: State) -> State | None:
    """The trial's state after `outcome` (None: it stays where it is)."""
    if outcome == Outcome.STOPPED:
        return STOPPING_TO_TERMINAL.get(trial_state)
    return {
        Outcome.INVALID_HP: State.COMPLETED,
        Outcome.COMPLETED: State.COMPLETED,
        Outcome.EXITED_OK: State.COMPLETED,
        Outcome.KILLED: State.CANCELED,
        Outcome.FAILED: State.ERROR,
    }.get(outcome)
