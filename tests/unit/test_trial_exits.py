"""How an allocation's end decides its trial's fate: every rule, alone (master/trial_exits.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from detlab.protocol import ExitCause
from master.states import State
from master.trial_exits import ExitFacts, Outcome, decide, final_state

BASE = ExitFacts(
    trial_state=State.ACTIVE,
    exit_code=0,
    error=None,
    cause=None,
    invalid_hp=False,
    closing=False,
    trained_enough=False,
    experiment_completing=False,
    preempt_requested=False,
    kill_requested=False,
    restarts=0,
    max_restarts=5,
)


@pytest.mark.parametrize(
    ("changes", "outcome", "state"),
    [
        ({"trial_state": State.STOPPING_CANCELED, "exit_code": 1}, Outcome.STOPPED, State.CANCELED),
        ({"trial_state": State.STOPPING_COMPLETED}, Outcome.STOPPED, State.COMPLETED),
        ({"trial_state": State.PAUSED}, Outcome.PAUSED, None),
        ({"trial_state": State.COMPLETED}, Outcome.ALREADY_ENDED, None),
        ({"invalid_hp": True, "exit_code": 1}, Outcome.INVALID_HP, State.COMPLETED),
        ({"closing": True, "trained_enough": True}, Outcome.COMPLETED, State.COMPLETED),
        # Stopped early by the searcher and killed past the preemption timeout: still done.
        (
            {"closing": True, "trained_enough": True, "exit_code": 137, "preempt_requested": True},
            Outcome.COMPLETED,
            State.COMPLETED,
        ),
        ({"trained_enough": True}, Outcome.WAIT_FOR_SEARCHER, None),
        # Told "no work", then promoted before its exit was seen: the promotion is still owed.
        ({"out_of_work": True}, Outcome.WAIT_FOR_SEARCHER, None),
        ({"out_of_work": True, "experiment_completing": True}, Outcome.COMPLETED, State.COMPLETED),
        ({"out_of_work": True, "exit_code": 1}, Outcome.RESTART, None),
        (
            {"trained_enough": True, "experiment_completing": True},
            Outcome.COMPLETED,
            State.COMPLETED,
        ),
        ({"preempt_requested": True}, Outcome.PREEMPTED, None),
        (
            {"preempt_requested": True, "exit_code": 137, "cause": ExitCause.PREEMPTION_TIMEOUT},
            Outcome.PREEMPTED,
            None,
        ),
        (
            {"exit_code": -15, "cause": ExitCause.AGENT_SHUTDOWN, "error": "x"},
            Outcome.REQUEUE,
            None,
        ),
        ({"exit_code": None, "cause": ExitCause.INSTANCE_INTERRUPTED}, Outcome.REQUEUE, None),
        ({"exit_code": 1, "kill_requested": True}, Outcome.KILLED, State.CANCELED),
        # Killed, and its script heard "preempt", checkpointed and exited 0 (the
        # stop 49 CI failure: the trial read COMPLETED), or it had done its work, or its
        # agent was shutting down: the user's kill still decides.
        ({"kill_requested": True}, Outcome.KILLED, State.CANCELED),
        ({"kill_requested": True, "trained_enough": True}, Outcome.KILLED, State.CANCELED),
        (
            {"kill_requested": True, "exit_code": -15, "cause": ExitCause.AGENT_SHUTDOWN},
            Outcome.KILLED,
            State.CANCELED,
        ),
        ({"exit_code": 1}, Outcome.RESTART, None),
        ({"exit_code": None, "cause": ExitCause.AGENT_LOST}, Outcome.RESTART, None),
        ({"exit_code": 1, "restarts": 5}, Outcome.FAILED, State.ERROR),
        ({"exit_code": 1, "max_restarts": 0}, Outcome.FAILED, State.ERROR),
        # No restart can pull an image that does not exist.
        ({"exit_code": 1, "cause": ExitCause.IMAGE_PULL_FAILED}, Outcome.FAILED, State.ERROR),
        # Determined 0.38: a clean exit completes the trial, searcher operations or not.
        ({}, Outcome.EXITED_OK, State.COMPLETED),
        ({"restarts": 5}, Outcome.EXITED_OK, State.COMPLETED),
    ],
)
def test_decide(changes: dict, outcome: Outcome, state: State | None) -> None:
    facts = replace(BASE, **changes)
    assert decide(facts) == outcome
    assert final_state(outcome, facts.trial_state) == state


def test_every_outcome_is_reachable() -> None:
    seen = {
        decide(replace(BASE, **c))
        for c in (
            {"trial_state": State.STOPPING_ERROR},
            {"trial_state": State.PAUSED},
            {"trial_state": State.ERROR},
            {"invalid_hp": True},
            {"closing": True, "trained_enough": True},
            {"trained_enough": True},
            {"preempt_requested": True},
            {"cause": ExitCause.AGENT_SHUTDOWN, "exit_code": 1},
            {"kill_requested": True, "exit_code": 1},
            {"exit_code": 1},
            {"exit_code": 1, "max_restarts": 0},
            {},
        )
    }
    assert seen == set(Outcome)
