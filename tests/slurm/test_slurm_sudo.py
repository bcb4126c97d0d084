"""Determined's production set-up: a master running as an unprivileged service user with
`sudo_authorized: true`, submitting (`sudo -n -u <job user> sbatch`) and cancelling each job as
the detlab user's linked Unix user. Real users (made once, `detlab-test-` prefix), a real
sudoers.d rule (the narrowest that works, as docs/slurm.md gives it), a real master process
running as the service user, the one-node test Slurm."""

from __future__ import annotations

import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster import Cluster, wait_for
from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_trial_api import DIGITS, digits_config, metrics, model_dir
from tests.slurm._configs import (
    assert_output_link_is_not_followed,
    ensure_user,
    link_admin,
    slurm_trial,
)
from tests.slurm.test_slurm_e2e import slurm_job_line

pytestmark = pytest.mark.integration

SERVICE, JOB_USER, OTHER = "detlab-test-svc", "detlab-test-job", "detlab-test-other"
SUDOERS = Path("/etc/sudoers.d/detlab-test-slurm")
# What a site admin writes (docs/slurm.md): the service user may run sbatch and scancel as
# the linked users only (here: the one job user), nothing as root; SLURM_CONF is kept because
# the test Slurm's config is not at the default path.
RULE = f"""\
Defaults:{SERVICE} env_keep += "SLURM_CONF"
{SERVICE} ALL=({JOB_USER}) NOPASSWD: /usr/bin/sbatch, /usr/bin/scancel
"""


@dataclass(frozen=True)
class Users:
    service: pwd.struct_passwd
    job: pwd.struct_passwd
    other: pwd.struct_passwd


def ensure_sudoers() -> None:
    if SUDOERS.exists() and SUDOERS.read_text() == RULE:
        return
    tmp = SUDOERS.with_name(f".detlab-test-slurm.{os.getpid()}")
    tmp.write_text(RULE)
    tmp.chmod(0o440)
    subprocess.run(["visudo", "-cf", str(tmp)], check=True, capture_output=True)
    tmp.rename(SUDOERS)  # sudo never reads a half-written rule


@pytest.fixture
def users() -> Users:
    if os.geteuid() != 0:
        pytest.fail("making Unix users and a sudoers rule needs root (the test machine is root)")
    if not Path("/usr/bin/sudo").exists():
        pytest.fail("sudo is not installed (scripts/test installs it with apt-get)")
    u = Users(ensure_user(SERVICE), ensure_user(JOB_USER), ensure_user(OTHER))
    ensure_sudoers()
    return u


def sudo_master(  # type: ignore[no-untyped-def]
    cluster_factory, users: Users, jobs_owner: pwd.struct_passwd | None = None
) -> tuple[Cluster, Path]:
    """A master running as the service user; its data dir and job_storage_root are its own
    (0711: job users pass through to their own job directory, none can list or write it)."""
    c: Cluster = cluster_factory(start=False)
    svc = users.service
    jobs = c.tmp / "slurm-jobs"
    for d, mode, owner in (
        (jobs, 0o711, jobs_owner or svc),
        (c.data_dir, 0o700, svc),
        (c.ckpt_dir, 0o700, users.job),  # the trials write their checkpoints as the job user
    ):
        d.mkdir()
        os.chown(d, owner.pw_uid, owner.pw_gid)
        d.chmod(mode)
    c.master_yaml = f"""
resource_manager:
  type: slurm
  job_storage_root: {jobs}
  default_compute_resource_pool: low
  sudo_authorized: true
resource_pools: [{{pool_name: low}}, {{pool_name: high}}]
"""
    c.start_master(uid=svc.pw_uid, gid=svc.pw_gid)
    link_admin(c, users.job)
    return c, jobs


def job_field(job_id: str, fmt: str) -> str:
    return subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job_id, "-o", fmt],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def as_user(name: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", name, "--", *argv], capture_output=True, text=True, check=False
    )


def job_id_of(c: Cluster, trial_id: int) -> str:
    return slurm_job_line(c, trial_id).split("job ")[1].split()[0]


def test_a_service_user_master_runs_a_digits_trial_as_the_linked_user(  # type: ignore[no-untyped-def]
    slurm: Path, cluster_factory, users: Users
) -> None:
    c, jobs = sudo_master(cluster_factory, users)
    config = slurm_trial(c, batches=100, validate_every=100, max_restarts=0)
    exp_id = submit(c, config, DIGITS)
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id) + c.read_log("master")
    trial_id = d["trials"][0]["id"]
    assert [s for s, _ in metrics(c, trial_id)["validation"]] == [100]
    logs = "\n".join(c.logs(trial_id))
    assert "validation at batch 100" in logs  # the job's output.log reached detlab
    # Slurm ran it as the job user, submitted by the service user through sudo
    job_id = job_id_of(c, trial_id)
    assert job_field(job_id, "%u|%T") == f"{JOB_USER}|COMPLETED"
    # The job directory is the master's (it could not give it away), 0700 plus an ACL for the
    # job user alone; what the job wrote there is the job user's.
    job_dir = next(p for p in jobs.iterdir() if p.is_dir())
    st = job_dir.stat()
    assert (st.st_uid, st.st_mode & 0o007) == (users.service.pw_uid, 0)
    for name in ("output.log", "exit_status"):
        assert (job_dir / name).stat().st_uid == users.job.pw_uid, name
    assert not (job_dir / "spec.json").exists()  # removed with its revoked token
    ckpt = c.get(f"/trials/{trial_id}/checkpoints")["checkpoints"]
    assert (c.ckpt_dir / ckpt[0]["uuid"]).stat().st_uid == users.job.pw_uid


def test_the_token_is_the_job_users_alone_pause_and_kill_reach_its_job(  # type: ignore[no-untyped-def]
    slurm: Path, cluster_factory, users: Users
) -> None:
    c, jobs = sudo_master(cluster_factory, users)
    model = model_dir(c.tmp)
    slow = digits_config(
        c,
        entrypoint="slow_def:SlowDigits",
        hparams={"sleep": 0.5},
        resources={"slots_per_trial": 1, "resource_pool": "low"},
    )
    exp_id = submit(c, slow, model)
    trial_id = only_trial(c, exp_id)["id"]
    wait_for(
        lambda: any("batch" in ln for ln in c.logs(trial_id)),
        120,
        what="the slow trial to log from its Slurm job",
    )
    first = job_id_of(c, trial_id)
    # Pause: the trial checkpoints (as the job user) and its job ends; activate resumes it
    # from that checkpoint in a second job, whose directory is handed over the same way.
    c.det("experiment", "pause", str(exp_id))
    paused = c.wait_trial(
        trial_id, lambda t: t["state"] == "PAUSED" and t["allocation_id"] is None, timeout=90
    )
    assert paused["latest_checkpoint"], paused
    assert job_field(first, "%u|%T") == f"{JOB_USER}|COMPLETED"
    c.det("experiment", "activate", str(exp_id))
    wait_for(
        lambda: "resumed from checkpoint" in "\n".join(c.logs(trial_id)),
        120,
        what="the trial to resume in a second Slurm job",
    )
    job_id = [ln for ln in c.logs(trial_id) if "submitted to Slurm as job" in ln][-1]
    job_id = job_id.split("job ")[1].split()[0]
    assert job_id != first and job_field(job_id, "%u|%T") == f"{JOB_USER}|RUNNING"

    job_dir = next(p for p in jobs.iterdir() if (p / "spec.json").exists())
    spec = job_dir / "spec.json"
    assert "DET_SESSION_TOKEN" in as_user(JOB_USER, "cat", str(spec)).stdout
    # Another Unix user of the node: neither the token nor the job directory's names, nor a
    # file of its own there; the job user cannot write beside its job directory.
    for argv in (["cat", str(spec)], ["ls", str(job_dir)], ["touch", f"{job_dir}/x"]):
        denied = as_user(OTHER, *argv)
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, argv
    denied = as_user(JOB_USER, "mkdir", f"{jobs}/mine")
    assert denied.returncode != 0 and "Permission denied" in denied.stderr

    # The kill reaches Slurm: the master scancels as the job's owner (through sudo).
    c.det("experiment", "kill", str(exp_id))
    c.wait_experiment(exp_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=60)
    wait_for(lambda: job_field(job_id, "%T") == "CANCELLED", 30, what=f"job {job_id} cancelled")
    assert c.experiment(exp_id)["experiment"]["state"] == "CANCELED"

    # A hostile job replaces its output.log by a link to a file only the master may read:
    # the master must not ship that file into the job user's logs.
    secret = c.data_dir / "secret"
    secret.touch()
    os.chown(secret, users.service.pw_uid, users.service.pw_gid)
    assert_output_link_is_not_followed(c, secret)


def test_a_job_storage_root_the_service_user_cannot_use_holds_the_queue_with_the_reason(  # type: ignore[no-untyped-def]
    slurm: Path, cluster_factory, users: Users
) -> None:
    c, jobs = sudo_master(cluster_factory, users, jobs_owner=pwd.getpwuid(0))  # root's, 0711
    sleeper = digits_config(
        c, entrypoint="sleep 60", resources={"slots_per_trial": 1, "resource_pool": "low"}
    )
    exp_id = submit(c, sleeper, DIGITS)
    trial_id = only_trial(c, exp_id)["id"]

    def reason() -> str | None:
        for task in c.get("/tasks")["tasks"]:
            if task.get("trial_id") == trial_id and task.get("waiting_for"):
                return str(task["waiting_for"])
        return None

    why = wait_for(reason, 60, what="the queue reason")
    assert (
        f"job_storage_root {jobs} is not usable by the master's user {SERVICE}: "
        "Permission denied" in why
    ), why
    assert not slurm_job_line(c, trial_id)  # nothing submitted, no restart spent
    # Fixed without a restart: the next pass submits the trial.
    os.chown(jobs, users.service.pw_uid, users.service.pw_gid)
    wait_for(lambda: slurm_job_line(c, trial_id), 60, what="the trial submitted to Slurm")
    c.det("experiment", "kill", str(exp_id))
    c.wait_experiment(exp_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=60)
    assert only_trial(c, exp_id)["restarts"] == 0
