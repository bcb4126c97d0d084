"""What the Slurm tests set up, in one place: a master on the test Slurm (`slurm_master`); the
digits experiment config they submit (`slurm_trial`: a single-searcher trial of so many
batches, validated every so many, of so many slots in one partition; optionally the slow
variant, `slow_def:SlowDigits`, which sleeps between batches so that a test can act on a trial
mid-run; it needs `model_dir(c.tmp)` as the model definition); the admin's link to a Unix user;
the hostile job that swaps its output.log for a link to a secret; stopping the test
Slurm's slurmctld (`stop_slurmctld`, started again with `start_slurm`); the tests' Unix users
(`ensure_user`); and a command run to its end (`run_command`)."""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.cluster import ROOT, Cluster, wait_for
from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_trial_api import DIGITS, digits_config


def slurm_master(
    cluster_factory: Any, tmp: str = "slurm-jobs", extra: str = "", start: bool = True
) -> Cluster:
    """A master whose resource manager is the test Slurm (pools `low` and `high`); `extra` adds
    lines (two-space indented) to its `resource_manager` section."""
    c: Cluster = cluster_factory(start=False)
    jobs = c.tmp / tmp
    jobs.mkdir()
    c.master_yaml = f"""
resource_manager:
  type: slurm
  job_storage_root: {jobs}
  default_compute_resource_pool: low
{extra}resource_pools: [{{pool_name: low}}, {{pool_name: high}}]
"""
    if start:
        c.start_master()
    return c


def link_admin(c: Cluster, user: pwd.struct_passwd) -> None:
    """`det user link-with-agent-user admin` to that Unix user and its primary group."""
    c.det(
        "user", "link-with-agent-user", "admin",
        "--agent-uid", str(user.pw_uid), "--agent-gid", str(user.pw_gid),
        "--agent-user", user.pw_name, "--agent-group", grp.getgrgid(user.pw_gid).gr_name,
    )  # fmt: skip


def assert_output_link_is_not_followed(c: Cluster, secret: Path) -> None:
    """A job that swaps its output.log for a link to `secret` (a file the job's user may not
    read, and the master may) never gets the secret's words into its logs."""
    word = f"detlab-secret-{secrets.token_hex(8)}"
    secret.write_text(word + "\n")
    secret.chmod(0o600)
    swap = f"cd .. && mv output.log output.old && ln -s {secret} output.log && sleep 4"
    hostile = digits_config(
        c, entrypoint=swap, max_restarts=0, resources={"slots_per_trial": 1, "resource_pool": "low"}
    )
    exp_id = submit(c, hostile, DIGITS)
    c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=120)
    logs = "\n".join(c.logs(only_trial(c, exp_id)["id"]))
    assert word not in logs
    assert "not reading the job's output.log: output.log is a symbolic link" in logs, logs


def slurm_trial(
    c: Cluster,
    base: str = "const.yaml",
    *,
    batches: int | None = None,
    validate_every: int | None = None,
    slots: int = 1,
    pool: str = "low",
    slow: float | None = None,
    **over: Any,
) -> str:
    """A digits config for cluster `c` (None leaves the base file's searcher, validation period
    and entrypoint); `over` sets any other top-level key, as digits_config does."""
    if batches is not None:
        over["searcher"] = {
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": batches},
        }
    if validate_every is not None:
        over["min_validation_period"] = {"batches": validate_every}
    if slow is not None:
        over["entrypoint"] = "slow_def:SlowDigits"
        over["hparams"] = {"sleep": slow, **over.get("hparams", {})}
    over["resources"] = {"slots_per_trial": slots, "resource_pool": pool}
    return digits_config(c, base, **over)


def stop_slurmctld(conf: Path) -> Path:
    """Stop the slurmctld of the test Slurm whose slurm.conf is `conf` (its slurmds and munged
    go on) and wait until it no longer answers; its root."""
    root = conf.parent.parent
    pid = int((root / "run" / "slurmctld.ours").read_text())
    os.kill(pid, signal.SIGTERM)
    wait_for(
        lambda: subprocess.run(["squeue", "-h"], capture_output=True).returncode != 0,
        30,
        what="slurmctld to stop answering",
    )
    return root


def start_slurm(root: Path, port: str) -> None:
    """Start the test Slurm under `root` again on its own `port` (without --port, `up` rewrites
    slurm.conf for the default port, which may be another run's slurmctld)."""
    subprocess.run(["bash", str(ROOT / "scripts/slurm/up"), str(root), "--port", port], check=True)


def ensure_user(name: str, home: bool = False) -> pwd.struct_passwd:
    """A system user without a login shell (with a home if `home`), made once and kept
    (another run may use it)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    made = subprocess.run(
        ["useradd", "--system", "--user-group", "--create-home" if home else "--no-create-home"]
        + ["--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode not in (0, 9):  # 9: made meanwhile by another run
        raise RuntimeError(f"useradd {name}: {made.stderr}")
    return pwd.getpwnam(name)


def run_command(c: Cluster, config: dict[str, Any], want: str) -> tuple[dict[str, Any], str]:
    """Run a command to its end; its task and its logs once they hold `want`."""
    r = c.post("/commands", {"config": config})
    assert r.status_code == 201, r.text
    task_id = r.json()["command"]["id"]
    done = wait_for(
        lambda: (t := c.get(f"/tasks/{task_id}")["task"])["state"] in ("COMPLETED", "ERROR") and t,
        120,
        what="the command to end",
    )

    def lines() -> list[str]:
        return [x["line"] for x in c.get(f"/tasks/{task_id}/logs", limit=1000)["logs"]]

    wait_for(lambda: want in "\n".join(lines()), 30, what=f"{want!r} in the logs: {lines()}")
    return done, "\n".join(lines())
