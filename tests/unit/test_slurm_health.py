"""Slurm unwell in detlab's words: down or drained nodes, pending reasons about them, munge."""

from __future__ import annotations

from master.rm import slurm_cli as cli
from master.rm import slurm_health as health
from master.rm.backoff import next_backoff


def test_sinfo_counts_down_and_drained_nodes_apart() -> None:
    text = "low*|up|1|2|gpu:2|drain\nlow*|up|2|2|gpu:2|idle\nhigh|up|1|2|gpu:2|down*\n"
    rows = cli.parse_sinfo(text)
    # a drained node keeps its slots in the capacity: Slurm queues jobs until it is back
    assert rows["low"].gpus == 6 and rows["low"].unusable == 1
    assert rows["low"].unusable_states == ("drain",)
    assert rows["high"].unusable == 1
    assert health.pool_note(rows["low"], "low") == (
        "1 of 3 nodes of Slurm partition low are down or drained (drain)"
    )
    assert health.pool_note(rows["high"], "high") == (
        "every node of Slurm partition high is down or drained (down*)"
    )
    # five fields (an older format) still parse, every node usable
    assert cli.parse_sinfo("low|up|1|2|gpu:2\n")["low"].unusable == 0


def test_node_states() -> None:
    for state in ("down", "drain", "drng", "drained", "fail", "idle*", "mix*", "down~", "maint"):
        assert cli.node_state_unusable(state), state
    for state in ("idle", "mix", "alloc", "comp", "idle~", "resv", ""):
        assert not cli.node_state_unusable(state), state


def test_pool_notes_for_a_missing_or_down_partition() -> None:
    assert health.pool_note(None, "x") == "Slurm has no partition x"
    down = cli.parse_sinfo("x|down|1|2|(null)|idle\n")["x"]
    assert health.pool_note(down, "x") == "Slurm partition x is down"
    up = cli.parse_sinfo("x|up|1|2|(null)|idle\n")["x"]
    assert health.pool_note(up, "x") is None


def test_pending_reasons_about_nodes_say_so() -> None:
    note = "every node of Slurm partition low is down or drained (drain)"
    assert health.pending_reason("ReqNodeNotAvail, UnavailableNodes:vm", note) == (
        f"waiting in Slurm: {note} (Slurm: ReqNodeNotAvail, UnavailableNodes:vm)"
    )
    assert health.pending_reason("Resources", note) == (
        f"waiting in Slurm: {note} (Slurm: Resources)"
    )
    assert health.pending_reason("ReqNodeNotAvail", None) == (
        "waiting in Slurm: the nodes it needs are down or drained (Slurm: ReqNodeNotAvail)"
    )
    assert health.pending_reason("Priority", None) == "waiting in Slurm: Priority"
    assert health.pending_reason("None", note) is None


def test_munge_failures_are_one_line() -> None:
    err = (
        'sbatch: error: Munge encode failed: Failed to access "/x/munge.sock": '
        "No such file or directory\n"
        "sbatch: error: auth_g_create: REQUEST_SUBMIT_BATCH_JOB failure\n"
        "sbatch: error: Batch job submission failed: Protocol authentication error\n"
    )
    line = health.munge_failure(err)
    assert line is not None and "\n" not in line
    assert line.startswith("Slurm's authentication (munge) fails")
    assert "Munge encode failed" in line
    assert health.munge_failure("sbatch: error: Invalid partition name specified") is None


def test_sbatch_failures_that_pass_are_told_apart_from_wrong_jobs() -> None:
    timed_out = (
        "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n"
    )
    assert health.transient_failure(timed_out)
    assert health.transient_failure(
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
        "(connect failure)\n"
    )
    assert health.transient_failure("sbatch: error: Munge encode failed: Socket communication")
    assert health.transient_failure("sbatch did not answer within 30 s")
    assert not health.transient_failure("sbatch: error: Invalid partition name specified")
    assert not health.transient_failure("sbatch: error: invalid time limit specification")


def test_the_submission_back_off_doubles_to_a_minute() -> None:
    waits, w = [], None
    for _ in range(6):
        w = next_backoff(w)
        waits.append(w)
    assert waits == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
