"""The Slurm RM's pure parts: sbatch arguments, squeue and sinfo parsing, state mapping."""

from __future__ import annotations

import pytest

from master.rm import slurm_cli as cli
from master.rm.slurm_config import PartitionOverride, SlurmConfig

CFG = SlurmConfig(job_storage_root="/shared/jobs")
SUB = cli.Submission(
    task_id="7.abc", allocation_id="a-1", partition="gpu", slots=2, job_dir="/shared/jobs/a-1"
)


def test_sbatch_carries_the_task_and_allocation_and_asks_for_gpus_by_gres() -> None:
    argv = cli.sbatch_argv(CFG, SUB)
    assert argv[0] == "sbatch" and argv[-1] == "/shared/jobs/a-1/job.sh"
    for arg in (
        "--parsable",
        "--job-name=det-7.abc",
        "--comment=detlab:a-1",
        "--partition=gpu",
        "--no-requeue",
        "--open-mode=append",
        "--output=/shared/jobs/a-1/output.log",
        "--export=NONE",
        "--gres=gpu:2",
        f"--signal=B:USR1@{cli.SIGNAL_LEAD_S}",
    ):
        assert arg in argv


@pytest.mark.parametrize(
    ("cfg", "partition", "slots", "want"),
    [
        (SlurmConfig("/j", gres_supported=False), "gpu", 2, ["--gpus=2"]),
        (SlurmConfig("/j", slot_type="cpu"), "any", 4, ["--cpus-per-task=4"]),
        (
            SlurmConfig("/j", partition_overrides={"c": PartitionOverride(slot_type="cpu")}),
            "c",
            3,
            ["--cpus-per-task=3"],
        ),
        (SlurmConfig("/j"), "gpu", 0, ["--cpus-per-task=1"]),
    ],
)
def test_resource_arguments(cfg: SlurmConfig, partition: str, slots: int, want: list[str]) -> None:
    assert cli.resource_args(cfg, cfg.slot_type_of(partition), slots) == want


def test_sudo_only_when_authorized() -> None:
    sudo = SlurmConfig("/j", user_name="det", sudo_authorized=True)
    assert cli.sbatch_argv(sudo, SUB, cli.JobUser("alice", 1234, 1235), as_root=True)[:4] == [
        "sudo",
        "-n",
        "-u",
        "alice",
    ]
    assert cli.sbatch_argv(sudo, SUB)[:4] == ["sudo", "-n", "-u", "det"]
    assert (
        cli.sbatch_argv(SlurmConfig("/j", user_name="det"), SUB, cli.JobUser("alice"))[0]
        == "sbatch"
    )


def test_squeue_keeps_detlab_jobs_and_the_newest_per_allocation() -> None:
    text = (
        "11|PENDING|Resources|detlab:a-1\n"
        "12|RUNNING|None|(null)\n"  # someone else's job
        "13|COMPLETED|None|detlab:a-2\n"
        "9|CANCELLED|None|detlab:a-2\n"
        "garbage line\n"
    )
    rows = cli.parse_squeue(text)
    assert set(rows) == {"a-1", "a-2"}
    assert rows["a-1"].phase == cli.JobPhase.PENDING
    assert rows["a-2"].job_id == "13" and rows["a-2"].phase == cli.JobPhase.ENDED


@pytest.mark.parametrize(
    ("state", "phase"),
    [
        ("PENDING", cli.JobPhase.PENDING),
        ("REQUEUED", cli.JobPhase.PENDING),
        ("RUNNING", cli.JobPhase.RUNNING),
        ("COMPLETING", cli.JobPhase.RUNNING),
        ("COMPLETED", cli.JobPhase.ENDED),
        ("CANCELLED by 0", cli.JobPhase.ENDED),
        ("NODE_FAIL", cli.JobPhase.ENDED),
        ("OUT_OF_MEMORY", cli.JobPhase.ENDED),
        ("", cli.JobPhase.ENDED),
    ],
)
def test_state_mapping(state: str, phase: cli.JobPhase) -> None:
    assert cli.phase_of(state) == phase


def test_pending_reasons_become_queue_reasons() -> None:
    assert cli.pending_reason("Resources") == "waiting in Slurm: Resources"
    assert cli.pending_reason("None") is None and cli.pending_reason("") is None


def test_sinfo_capacity() -> None:
    text = (
        "low*|up|1|2|gpu:2\nhigh|up|1|2|gpu:a100:2(S:0),shard:4\n"
        "big|up|2|64|gpu:4\nbig|up|1|32|(null)\nx|down|1|2|(null)\n"
    )
    rows = cli.parse_sinfo(text)
    assert rows["low"].gpus == 2 and rows["high"].gpus == 2
    assert cli.partition_slots(rows["big"], "cuda") == 8
    assert cli.partition_slots(rows["big"], "cpu") == 160
    assert cli.partition_slots(rows["low"], "cpu") == 2
    assert rows["x"].up is False


def test_sbatch_output_and_refusals() -> None:
    assert cli.parse_job_id("42\n") == "42" and cli.parse_job_id("43;cluster\n") == "43"
    with pytest.raises(ValueError, match="no job id"):
        cli.parse_job_id("")
    err = (
        "sbatch: error: Batch job submission failed: "
        "Requested node configuration is not available\n"
    )
    assert cli.refusal_never_fits(err)
    assert cli.slurm_words(err) == (
        "Batch job submission failed: Requested node configuration is not available"
    )
    assert not cli.refusal_never_fits("sbatch: error: Socket timed out on send/recv operation")


def test_status_file_and_endings() -> None:
    assert cli.parse_status("3\n") == 3 and cli.parse_status("") is None
    assert cli.parse_status("1") == 1 and cli.parse_status("x") is None
    row = cli.JobRow("5", "CANCELLED", "None", "a")
    assert (
        cli.ended_without_status(row, "5") == "Slurm job 5 ended CANCELLED without an exit status"
    )
    assert "vanished" in cli.ended_without_status(None, "5")


def test_job_script_writes_the_status_file_atomically() -> None:
    script = cli.job_script("/venv/bin/python", "/code", "/jobs/a 1", "/venv/bin")
    assert "-m agent.slurm_job '/jobs/a 1/spec.json'" in script
    assert "mv -f '/jobs/a 1/exit_status.tmp' '/jobs/a 1/exit_status'" in script
    assert "export PATH=/venv/bin:/usr/local/bin" in script


def test_a_root_master_submits_as_the_linked_user_by_id() -> None:
    alice = cli.JobUser("alice", 1234, 1235)
    argv = cli.sbatch_argv(CFG, SUB, alice, as_root=True)
    assert argv[0] == "sbatch" and "--uid=1234" in argv and "--gid=1235" in argv
    assert argv[-1].endswith(cli.SCRIPT_FILE)  # the options come before the script
    # not root: Slurm refuses --uid, so none is passed (the job runs as the master's user)
    assert not any(a.startswith("--uid") for a in cli.sbatch_argv(CFG, SUB, alice))
    # with sudo the job's user is sudo's, not --uid's
    sudo = SlurmConfig("/j", sudo_authorized=True)
    assert not any(a.startswith("--uid") for a in cli.sbatch_argv(sudo, SUB, alice, True))
