"""`container_run_type: podman`: a digits trial as a Slurm job whose launcher runs in a Podman
container of the default image, to COMPLETED, with proof that it ran inside the container."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.images import default_image
from tests.cluster import ROOT, Cluster
from tests.integration.test_foundation import submit
from tests.integration.test_trial_api import DIGITS, digits_config, metrics
from tests.slurm._configs import slurm_trial

pytestmark = pytest.mark.integration

# Imported by the harness in the trial's process: says where that process runs. Podman puts
# /run/.containerenv and `container=podman` into every container; the host has neither, and its
# Python is detlab's venv, not the image's.
MARKER_DEF = """
import os, sys
from pathlib import Path
from model_def import DigitsTrial

print("marker: containerenv=%s container=%s python=%s" % (
    Path("/run/.containerenv").exists(), os.environ.get("container"), sys.executable), flush=True)


class MarkedDigits(DigitsTrial):
    pass
"""


@pytest.fixture(scope="module")
def podman_image() -> str:
    """The default CPU image in Podman's store, copied from Docker's (no network needed)."""
    assert shutil.which("podman"), "podman is not installed (scripts/test installs it)"
    image = default_image(False)
    if subprocess.run(["podman", "image", "exists", image]).returncode != 0:
        subprocess.run(
            ["podman", "pull", "-q", f"docker-daemon:{image}"], check=True, capture_output=True
        )
    return image


def _podman_master(cluster_factory) -> Cluster:  # type: ignore[no-untyped-def]
    c: Cluster = cluster_factory(start=False)
    jobs = c.tmp / "slurm-jobs"
    jobs.mkdir()
    c.master_yaml = f"""
resource_manager:
  type: slurm
  job_storage_root: {jobs}
  container_run_type: podman
  default_compute_resource_pool: low
resource_pools: [{{pool_name: low}}, {{pool_name: high}}]
"""
    c.start_master()
    return c


def marked_model(c: Cluster, marker: str = MARKER_DEF) -> Path:
    """The digits model definition with `marker` (a marked_def.py) beside it."""
    model = c.tmp / "marked-model"
    model.mkdir()
    shutil.copy(DIGITS / "model_def.py", model / "model_def.py")
    (model / "marked_def.py").write_text(marker)
    return model


def podman_trial(c: Cluster, image: str, **over: Any) -> str:
    """A 100-batch marked digits trial in `image`."""
    return slurm_trial(
        c,
        batches=100,
        validate_every=100,
        entrypoint="marked_def:MarkedDigits",
        environment={"image": image},
        **over,
    )


def test_a_digits_trial_runs_in_a_podman_container_to_completed(  # type: ignore[no-untyped-def]
    slurm: Path, podman_image: str, cluster_factory
) -> None:
    c = _podman_master(cluster_factory)
    model = marked_model(c)
    # the test Slurm's slots are (fake) GPUs, whose default image is the CUDA one
    config = podman_trial(c, podman_image)
    exp_id = submit(c, config, model)
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    trial = d["trials"][0]
    assert [s for s, _ in metrics(c, trial["id"])["validation"]] == [100]
    # the checkpoint went through the mounted shared_fs storage to the master's directory
    ckpts = c.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert (c.ckpt_dir / ckpts[0]["uuid"] / "state.pt").exists()
    logs = "\n".join(c.logs(trial["id"]))
    marker = next((ln for ln in logs.splitlines() if "marker:" in ln), "")
    assert "containerenv=True container=podman" in marker, logs[-3000:]
    assert f"python={sys.executable}" not in marker
    # the container is gone with the job (--rm)
    left = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True
    ).stdout
    assert not [n for n in left.split() if n.startswith("detlab-")], left


def test_a_bind_mount_over_detlabs_code_ends_the_trial_with_the_reason(  # type: ignore[no-untyped-def]
    slurm: Path, podman_image: str, cluster_factory, tmp_path: Path
) -> None:
    c = _podman_master(cluster_factory)
    config = digits_config(
        c,
        environment={"image": podman_image},
        bind_mounts=[{"host_path": str(tmp_path), "container_path": str(ROOT)}],
        max_restarts=0,
        resources={"slots_per_trial": 1, "resource_pool": "low"},
    )
    exp_id = submit(c, config, DIGITS)
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=120)
    assert d["experiment"]["state"] == "ERROR"
    logs = "\n".join(c.logs(d["trials"][0]["id"]))
    assert f"cannot start the Slurm job's container: two mounts at {ROOT}" in logs, logs
    assert "submitted to Slurm" not in logs
