"""Slurm unwell, in detlab's words: a drained node (the pool says so, a job pending on it says
why), munge failing (one clear line in the task's log and the master's, no crash loop), an
sbatch that Slurm did not answer (the trial waits and is submitted again, its restarts kept),
and a job that slurmctld forgot (said so; the trial runs again as a new job)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.cluster import wait_for
from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_trial_api import DIGITS
from tests.slurm._configs import slurm_master, slurm_trial, start_slurm, stop_slurmctld
from tests.slurm.conftest import SLURM_PORT
from tests.slurm.test_slurm_e2e import job_state

pytestmark = pytest.mark.integration


def scontrol_node(node: str, *fields: str) -> None:
    subprocess.run(["scontrol", "update", f"NodeName={node}", *fields], check=True)


def test_a_drained_node_is_the_pools_note_and_the_pending_jobs_reason(
    slurm: Path, cluster_factory
) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    node = subprocess.run(
        ["sinfo", "--noheader", "--partition=low", "--format=%N"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert node, "the test Slurm has no node in partition low"

    def low_pool() -> dict:
        return next(p for p in c.det_json("job", "list") if p["name"] == "low")

    scontrol_node(node, "State=DRAIN", "Reason=detlab-test")
    try:
        note = wait_for(lambda: low_pool().get("note"), 60, what="the pool's note")
        assert note == "every node of Slurm partition low is down or drained (drain)", note
        assert f"Note: {note}" in c.det("job", "list").stdout
        sleeper = slurm_trial(c, entrypoint="sleep 120")
        exp_id = submit(c, sleeper, DIGITS)

        def reason() -> str | None:
            trial_id = only_trial(c, exp_id)["id"]
            for task in c.get("/tasks")["tasks"]:
                why = task.get("waiting_for") or ""
                if task.get("trial_id") == trial_id and "(Slurm: " in why:
                    return str(why)
            return None

        why = wait_for(reason, 60, what="the pending job's reason")
        assert why.startswith(f"waiting in Slurm: {note} (Slurm: "), why
        # the drained node keeps the pool's capacity: the job waits, it is not "never fits"
        assert low_pool()["slots_total"] == 2
    finally:
        scontrol_node(node, "State=RESUME")
    wait_for(lambda: low_pool().get("note") is None or None, 60, what="the note to clear")
    wait_for(
        lambda: "Slurm job" in "\n".join(c.logs(only_trial(c, exp_id)["id"])) or None,
        60,
        what="the job to start once the node is back",
    )
    c.det("experiment", "kill", str(exp_id))
    c.wait_experiment(exp_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=60)


def test_a_munge_failure_is_one_clear_line(slurm: Path, cluster_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master_with_broken_munge(cluster_factory, slurm, monkeypatch)
    exp_id = submit(
        c,
        slurm_trial(c, entrypoint="sleep 5"),
        DIGITS,
    )

    def reason() -> str | None:
        trial_id = only_trial(c, exp_id)["id"]
        for task in c.get("/tasks")["tasks"]:
            if task.get("trial_id") == trial_id and "munge" in (task.get("waiting_for") or ""):
                return str(task["waiting_for"])
        return None

    why = wait_for(reason, 60, what="the queued trial's reason to name munge")
    assert "Slurm's authentication (munge) fails" in why and "Munge encode failed" in why, why
    assert "\n" not in why
    # every call asks sinfo again (each fails the same way): the master logs it once
    for _ in range(3):
        low = next(p for p in c.det_json("job", "list") if p["name"] == "low")
        assert "(munge) fails" in (low.get("note") or ""), low
    master_log = (c.tmp / "master.log").read_text()
    munge_lines = [ln for ln in master_log.splitlines() if "(munge) fails" in ln]
    assert len(munge_lines) == 1, munge_lines
    assert "Traceback" not in master_log
    assert c.master is not None and c.master.poll() is None  # no crash loop: it lives on
    assert only_trial(c, exp_id)["state"] == "ACTIVE"  # queued, not failed: nothing was spent
    c.det("experiment", "kill", str(exp_id))
    c.wait_experiment(exp_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=60)


def slurm_master_with_broken_munge(cluster_factory, slurm: Path, monkeypatch):  # type: ignore[no-untyped-def]
    """A master whose Slurm commands reach munge through a socket nobody listens on: a real
    munge failure, without stopping the munged that other tests share."""
    conf_dir = Path(slurm).parent.parent / "munge-broken-conf"
    conf_dir.mkdir(exist_ok=True)
    lines = [
        f"AuthInfo=socket={conf_dir}/nobody.sock" if ln.startswith("AuthInfo=") else ln
        for ln in Path(slurm).read_text().splitlines()
    ]
    (conf_dir / "slurm.conf").write_text("\n".join(lines) + "\n")
    (conf_dir / "gres.conf").write_text((Path(slurm).parent / "gres.conf").read_text())
    monkeypatch.setenv("SLURM_CONF", str(conf_dir / "slurm.conf"))
    return slurm_master(cluster_factory)


SBATCH_THAT_TIMES_OUT = """#!/bin/sh
# The real sbatch, except that its first {n} calls fail as a slurmctld too busy to answer does.
n=$(cat "{count}" 2>/dev/null || echo 0)
if [ "$n" -lt {n} ]; then
    echo $((n + 1)) > "{count}"
    echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2
    exit 1
fi
exec {real} "$@"
"""


def test_an_sbatch_slurm_did_not_answer_spends_no_restart(
    slurm: Path, cluster_factory, monkeypatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    real = subprocess.run(["which", "sbatch"], capture_output=True, text=True, check=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    count = tmp_path / "sbatch-calls"
    wrapper = bindir / "sbatch"
    wrapper.write_text(SBATCH_THAT_TIMES_OUT.format(n=2, count=count, real=real.stdout.strip()))
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    c = slurm_master(cluster_factory)
    # max_restarts 0: a spent restart would fail the trial
    config = slurm_trial(c, batches=50, validate_every=50, max_restarts=0)
    exp_id = submit(c, config, DIGITS)
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    assert count.read_text().strip() == "2"
    trial = d["trials"][0]
    assert trial.get("restarts", 0) == 0, trial
    logs = "\n".join(c.logs(trial["id"]))
    assert "sbatch failed: Batch job submission failed: Socket timed out" in logs, logs
    assert "back to the queue (its restarts untouched), Slurm is asked again in 5 s" in logs
    assert "Slurm is asked again in 10 s" in logs  # the second failure doubled the wait
    assert "submitted to Slurm as job" in logs


def test_a_job_slurm_forgot_is_said_to_have_vanished_and_the_trial_runs_again(
    slurm: Path, cluster_factory
) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    # --hold keeps the job pending (JobHeldUser), so no slurmd holds it when slurmctld loses
    # it (a running job that slurmctld forgot makes slurmd drain the node: "Duplicate jobid")
    config = slurm_trial(
        c, batches=50, validate_every=50, max_restarts=1, slurm={"sbatch_args": ["--hold"]}
    )
    exp_id = submit(c, config, DIGITS)
    tid = only_trial(c, exp_id)["id"]

    def jobs() -> list[str]:
        return re.findall(r"submitted to Slurm as job (\d+)", "\n".join(c.logs(tid)))

    first = wait_for(jobs, 60, what="the trial's job")[0]
    wait_for(lambda: job_state(first) == "PENDING", 30, what=f"job {first} to pend held")
    # slurmctld loses its jobs: stopped, its saved job state removed, started again
    root = stop_slurmctld(slurm)
    for saved in (root / "state").glob("job_state*"):
        saved.unlink()
    start_slurm(root, SLURM_PORT)
    gone = f"Slurm job {first} vanished from the queue without an exit status"
    wait_for(lambda: gone in "\n".join(c.logs(tid)), 60, what="the trial's log to say so")
    second = wait_for(lambda: len(jobs()) == 2 and jobs()[1], 60, what="the trial's second job")
    subprocess.run(["scontrol", "release", second], check=True)
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    # a job gone without a word is the trial's failed attempt: one restart spent
    assert d["trials"][0]["restarts"] == 1
