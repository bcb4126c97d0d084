"""The pure scheduler schedules task requests, whatever the task type: a command's request (its
own job, a UUID id) gets gang, priority and preemption exactly as a trial's does."""

from __future__ import annotations

from master.scheduler import AgentView, PoolPolicy, Request, Running, schedule

CMD_A = "0b5f6b5e-0000-4000-8000-00000000000a"
CMD_B = "0b5f6b5e-0000-4000-8000-00000000000b"
PREEMPT = PoolPolicy(type="priority", preemption=True)


def test_a_two_slot_command_waits_until_one_agent_has_both_slots() -> None:
    agent = [AgentView(id="a1", pool="default", free=(1,), total=2)]
    running = [Running(id=CMD_A, job_id="", placements=(("a1", (0,)),), preemptible=False)]
    wait = schedule(PoolPolicy(), [Request(id=CMD_B, slots=2)], running, agent)
    assert wait.assignments == [] and CMD_B in wait.waiting
    agent = [AgentView(id="a1", pool="default", free=(0, 1), total=2)]
    go = schedule(PoolPolicy(), [Request(id=CMD_B, slots=2)], [], agent)
    assert [(a.request_id, a.placements) for a in go.assignments] == [(CMD_B, (("a1", (0, 1)),))]


def test_priority_preempts_a_preemptible_command_and_never_another() -> None:
    agent = [AgentView(id="a1", pool="default", free=(), total=1)]
    urgent = [Request(id=CMD_B, priority=5)]
    for preemptible, victims in ((True, [CMD_A]), (False, [])):
        running = [
            Running(
                id=CMD_A,
                job_id="",
                placements=(("a1", (0,)),),
                priority=60,
                preemptible=preemptible,
            )
        ]
        decision = schedule(PREEMPT, urgent, running, agent)
        assert decision.preemptions == victims and decision.assignments == []
        assert CMD_B in decision.waiting


def test_a_trial_and_a_command_compete_by_priority_in_one_pool() -> None:
    agent = [AgentView(id="a1", pool="default", free=(0,), total=1)]
    trial = Request(id="3.req-1", job_id="3", priority=42, order=1.0)
    command = Request(id=CMD_A, priority=10, order=2.0)
    decision = schedule(PoolPolicy(), [trial, command], [], agent)
    assert [a.request_id for a in decision.assignments] == [CMD_A]
    assert "3.req-1" in decision.waiting
