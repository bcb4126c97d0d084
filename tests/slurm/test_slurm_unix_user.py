"""A Slurm job runs as the detlab user's linked Unix user, a real one created for the test: the
job directory is that user's, the spec with the session token readable by that user alone."""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_trial_api import DIGITS, digits_config
from tests.slurm._configs import assert_output_link_is_not_followed, link_admin, slurm_master

pytestmark = pytest.mark.integration


@pytest.fixture
def unix_user() -> Iterator[pwd.struct_passwd]:
    if os.geteuid() != 0:
        pytest.fail("creating a Unix user needs root (the test machine runs the suite as root)")
    name = f"dslurm{os.getpid() % 100000}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
    )
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)


def test_a_trial_runs_as_the_linked_unix_user(  # type: ignore[no-untyped-def]
    slurm: Path, cluster_factory, unix_user: pwd.struct_passwd
) -> None:
    c = slurm_master(cluster_factory)
    link_admin(c, unix_user)
    # The job reports who it is and how its spec file is held (the workdir is in the job dir).
    probe = 'echo "job-user=$(id -un) spec=$(stat -c %U:%a ../spec.json) dir=$(stat -c %U:%a ..)"'
    config = digits_config(
        c,
        entrypoint=probe,
        max_restarts=0,
        resources={"slots_per_trial": 1, "resource_pool": "low"},
    )
    exp_id = submit(c, config, DIGITS)
    c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=120)
    trial_id = only_trial(c, exp_id)["id"]
    logs = "\n".join(c.logs(trial_id))
    name = unix_user.pw_name
    assert f"job-user={name} spec={name}:600 dir={name}:700" in logs, logs
    # the job's own files stay the user's (Slurm wrote the output as that user)
    job_dir = next(p for p in (c.tmp / "slurm-jobs").iterdir() if p.is_dir())
    assert job_dir.stat().st_uid == unix_user.pw_uid
    assert (job_dir / "output.log").stat().st_uid == unix_user.pw_uid


def test_a_job_cannot_make_the_root_master_read_a_file_for_it(  # type: ignore[no-untyped-def]
    slurm: Path, cluster_factory, unix_user: pwd.struct_passwd
) -> None:
    """The job's user owns its job directory: it swaps its output.log for a link to a file only
    root may read, which the master (root) must not ship into that user's logs."""
    c = slurm_master(cluster_factory)
    link_admin(c, unix_user)
    assert_output_link_is_not_followed(c, c.tmp / "root-secret")
