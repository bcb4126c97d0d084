"""`container_run_type: podman` for a non-root job user: a root master submits the trial as the
linked Unix user (`--uid/--gid`), whose job runs Podman rootless. The image comes from a
shared read-only image store (`additionalimagestores`), as a site gives its users images
without each pulling its own copy; the checkpoints the container writes are the job user's."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_foundation import submit
from tests.integration.test_trial_api import metrics
from tests.slurm._configs import ensure_user, link_admin, slurm_master
from tests.slurm.test_slurm_podman import marked_model, podman_image, podman_trial  # noqa: F401 (podman_image: a fixture)

pytestmark = pytest.mark.integration

USER = "detlab-test-podman"
SUBIDS = 65536  # the subordinate ids Podman maps the container's other users to
# The shared store: root fills it, every job user reads it (never writes: it is read-only to
# them). Its run root holds root's locks while it is filled.
STORE = Path("/var/lib/detlab-test-images")
STORE_RUN = Path("/run/detlab-test-images")
# The user's storage: images from the shared store, overlay through fuse-overlayfs. Without the
# mount program, `--userns=keep-id` makes containers/storage copy the image's layers, chowned to
# the user's mapping, which fails on the store's root-only files ("error during chown: open
# root: permission denied"); fuse-overlayfs maps the ids when it mounts and copies nothing.
STORAGE_CONF = f"""[storage]
driver = "overlay"

[storage.options]
additionalimagestores = ["{STORE}"]

[storage.options.overlay]
mount_program = "/usr/bin/fuse-overlayfs"
"""

MARKER_DEF = """
import os
from pathlib import Path
from model_def import DigitsTrial

print("marker: containerenv=%s container=%s uid=%d" % (
    Path("/run/.containerenv").exists(), os.environ.get("container"), os.getuid()), flush=True)


class MarkedDigits(DigitsTrial):
    pass
"""


def _ensure_subids(name: str) -> None:
    """Give `name` a range in /etc/subuid and /etc/subgid (rootless Podman needs one), after
    every range there; a user that has one in both keeps it."""
    files = [Path("/etc/subuid"), Path("/etc/subgid")]
    entries = [ln.split(":") for f in files if f.exists() for ln in f.read_text().splitlines()]
    has = [f.exists() and any(ln.startswith(f"{name}:") for ln in f.read_text().splitlines())
           for f in files]  # fmt: skip
    if all(has):
        return
    start = max([100000] + [int(e[1]) + int(e[2]) for e in entries if len(e) == 3])
    span = f"{start}-{start + SUBIDS - 1}"
    subprocess.run(
        ["usermod", "--add-subuids", span, "--add-subgids", span, name],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def podman_user() -> pwd.struct_passwd:
    """A system user with a home (Podman keeps its configuration and storage there), made once
    and kept, with its subordinate ids and its storage.conf."""
    if os.geteuid() != 0:
        pytest.fail("making the job user needs root (the test machine runs the suite as root)")
    user = ensure_user(USER, home=True)
    _ensure_subids(USER)
    conf = Path(user.pw_dir) / ".config" / "containers" / "storage.conf"
    if not conf.exists() or conf.read_text() != STORAGE_CONF:
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(STORAGE_CONF)
        for d in (conf.parent.parent, conf.parent, conf):
            os.chown(d, user.pw_uid, user.pw_gid)
    return user


@pytest.fixture(scope="module")
def shared_image(podman_image: str) -> str:  # noqa: F811
    """The default CPU image in the shared store, copied from root's (no network needed)."""
    store = ["podman", "--root", str(STORE), "--runroot", str(STORE_RUN)]
    if subprocess.run([*store, "image", "exists", podman_image]).returncode != 0:
        dest = f"containers-storage:[overlay@{STORE}+{STORE_RUN}]docker.io/{podman_image}"
        subprocess.run(
            ["podman", "push", "-q", podman_image, dest], check=True, capture_output=True
        )
    # Readable by every user: the store's own directories and metadata, not the image's files
    # (their modes are the image's).
    subprocess.run(
        ["find", str(STORE), "-path", f"{STORE}/overlay/*/diff", "-prune", "-o"]
        + ["-exec", "chmod", "a+rX", "{}", "+"],
        check=True,
    )
    return podman_image


def test_a_digits_trial_runs_in_rootless_podman_as_the_job_user(  # type: ignore[no-untyped-def]
    slurm: Path, shared_image: str, podman_user: pwd.struct_passwd, cluster_factory
) -> None:
    user = podman_user
    c = slurm_master(cluster_factory, extra="  container_run_type: podman\n", start=False)
    c.ckpt_dir.mkdir()  # the trial writes its checkpoints as the job user
    os.chown(c.ckpt_dir, user.pw_uid, user.pw_gid)
    c.ckpt_dir.chmod(0o700)
    c.start_master()  # as root: Slurm gets --uid/--gid of the linked user
    link_admin(c, user)
    model = marked_model(c, MARKER_DEF)
    config = podman_trial(c, shared_image, max_restarts=0)
    exp_id = submit(c, config, model)
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    trial = d["trials"][0]
    logs = "\n".join(c.logs(trial["id"]))
    assert d["experiment"]["state"] == "COMPLETED", logs[-4000:] + c.diagnose(exp_id)
    assert [s for s, _ in metrics(c, trial["id"])["validation"]] == [100]
    # in the container, as the job user itself (--userns=keep-id), not as a subordinate uid
    marker = next((ln for ln in logs.splitlines() if "marker:" in ln), "")
    assert f"containerenv=True container=podman uid={user.pw_uid}" in marker, logs[-3000:]
    # Slurm ran the job as that user
    job_id = re.search(r"submitted to Slurm as job (\d+)", logs)
    assert job_id, logs
    shown = subprocess.run(
        ["scontrol", "show", "job", job_id[1]], capture_output=True, text=True, check=True
    ).stdout
    assert f"UserId={user.pw_name}({user.pw_uid})" in shown, shown
    # every checkpoint file is the job user's on the host
    ckpts = c.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    ckpt = c.ckpt_dir / ckpts[0]["uuid"]
    assert (ckpt / "state.pt").exists()
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in [ckpt, *ckpt.rglob("*")]}
    assert owners == {(user.pw_uid, user.pw_gid)}, owners
    # the container is gone with the job (--rm), from the user's own Podman
    left = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}"],
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        cwd="/",
        env={"HOME": user.pw_dir, "PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": _runtime(user)},
    )
    assert left.returncode == 0, left.stderr
    assert not [n for n in left.stdout.split() if n.startswith("detlab-")], left.stdout


def _runtime(user: pwd.struct_passwd) -> str:
    """The runtime dir job.sh picks for the user (master/rm/slurm_podman.py ROOTLESS_FUNCTION)."""
    run = Path(f"/run/user/{user.pw_uid}")
    return str(run) if run.is_dir() else f"/tmp/detlab-run-{user.pw_uid}"
