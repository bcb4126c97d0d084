"""The master-agent messages: what each side sends parses back to the same message."""

from __future__ import annotations

import pytest

from detlab.protocol import (
    PROTOCOL_VERSION,
    Action,
    ActionType,
    AllocationReport,
    ExitCause,
    PollReply,
    PollRequest,
    ProtocolError,
    ReportedState,
    SlotReport,
    StartSpec,
)

SPEC = StartSpec(
    allocation_id="a-1",
    trial_id=3,
    experiment_id=2,
    entrypoint="python3 train.py",
    slot_indexes=(0, 1),
    env={"DET_TRIAL_ID": "3"},
    environment={"image": "python:3.11"},
    model_def_url="/api/v1/experiments/2/model_def",
)


def test_poll_round_trip() -> None:
    req = PollRequest(
        resource_pool="gpu",
        slots=(SlotReport(0, "gpu", uuid="GPU-1", stats={"util": 3}), SlotReport(1)),
        allocations=(
            AllocationReport("a-1", ReportedState.RUNNING, pid=42),
            AllocationReport(
                "a-2", ReportedState.EXITED, -15, error="bye", cause=ExitCause.AGENT_SHUTDOWN
            ),
        ),
        wait=5.0,
        hostname="h",
        runtime="docker",
        version="0.1.0",
    )
    assert PollRequest.parse(req.to_json()) == req


def test_reply_round_trip_and_bad_actions_are_set_aside() -> None:
    reply = PollReply((Action.start(SPEC), Action.kill("a-9")))
    assert PollReply.parse(reply.to_json()) == (reply, [])
    body = reply.to_json()
    body["actions"].append({"type": "reboot"})
    body["actions"].append({"type": "start", "spec": {"allocation_id": 7}})
    parsed, errors = PollReply.parse(body)
    assert [a.type for a in parsed.actions] == [ActionType.START, ActionType.KILL]
    assert [e.path for e in errors] == ["actions[2].type", "actions[3].spec.allocation_id"]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ([], ""),
        ({"protocol": PROTOCOL_VERSION, "slots": {}}, "slots"),
        ({"protocol": PROTOCOL_VERSION, "slots": [{"index": True}]}, "slots[0].index"),
        ({"protocol": PROTOCOL_VERSION, "slots": [{"index": 0, "type": "tpu"}]}, "slots[0].type"),
        ({"protocol": PROTOCOL_VERSION, "allocations": [{"id": 1}]}, "allocations[0].id"),
        ({"protocol": PROTOCOL_VERSION, "allocations": [{"id": "x", "state": "GONE"}]},
         "allocations[0].state"),
        ({"slots": []}, "protocol"),
    ],
)  # fmt: skip
def test_bad_polls_name_the_field(body: object, path: str) -> None:
    with pytest.raises(ProtocolError) as e:
        PollRequest.parse(body)
    assert e.value.path == path


def test_exit_causes_know_what_they_mean() -> None:
    assert not ExitCause.IMAGE_PULL_FAILED.retryable
    assert not ExitCause.AGENT_SHUTDOWN.trials_fault
    assert ExitCause.AGENT_LOST.trials_fault and ExitCause.AGENT_LOST.retryable
    assert ExitCause.parse("agent_shutdown") is ExitCause.AGENT_SHUTDOWN
    assert ExitCause.parse("no such cause") is None and ExitCause.parse(3) is None
    assert all(c.message for c in ExitCause)
