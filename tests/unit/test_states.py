import pytest

from master.states import (
    IllegalTransition,
    State,
    can_transition,
    check_action,
    check_transition,
    trial_display_state,
)


def test_terminal_states_have_no_way_out() -> None:
    for terminal in (State.COMPLETED, State.CANCELED, State.ERROR):
        for dst in State:
            if dst != terminal:
                assert not can_transition(terminal, dst)


def test_pause_activate_round_trip() -> None:
    assert can_transition(State.ACTIVE, State.PAUSED)
    assert can_transition(State.PAUSED, State.ACTIVE)


def test_illegal_transition_message_names_states() -> None:
    with pytest.raises(
        IllegalTransition, match="experiment 7 is COMPLETED; it cannot become ACTIVE"
    ):
        check_transition("experiment", 7, State.COMPLETED, State.ACTIVE)


@pytest.mark.parametrize(
    ("state", "action", "ok"),
    [
        (State.ACTIVE, "pause", True),
        (State.PAUSED, "pause", False),
        (State.PAUSED, "activate", True),
        (State.ACTIVE, "activate", False),
        (State.ACTIVE, "kill", True),
        (State.STOPPING_CANCELED, "kill", True),
        (State.COMPLETED, "kill", False),
        (State.PAUSED, "cancel", True),
        (State.ERROR, "cancel", False),
    ],
)
def test_actions(state: State, action: str, ok: bool) -> None:
    if ok:
        check_action("experiment", 1, state, action)
    else:
        with pytest.raises(IllegalTransition, match=f"experiment 1 is {state.value}; only"):
            check_action("experiment", 1, state, action)


def test_display_state_of_active_trial_follows_allocation() -> None:
    assert trial_display_state(State.ACTIVE, None) == "QUEUED"
    assert trial_display_state(State.ACTIVE, "ASSIGNED") == "STARTING"
    assert trial_display_state(State.ACTIVE, "RUNNING") == "RUNNING"
    assert trial_display_state(State.ACTIVE, "TERMINATED") == "QUEUED"
    assert trial_display_state(State.PAUSED, "RUNNING") == "PAUSED"
