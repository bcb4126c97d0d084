"""The `podman run` prefix of a Slurm job with `container_run_type: podman` (pure)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from master.rm import slurm_cli as cli
from master.rm import slurm_podman as podman


def _spec(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "allocation_id": "a1",
        "environment": {},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt dir"},
        "bind_mounts": [],
    }
    spec.update(over)
    return spec


def _argv(spec: dict[str, Any], gpu: bool = False) -> list[str]:
    return shlex.split(podman.podman_prefix(spec, "/jobs/a1", "/code", "/jobs/.inject/lib", gpu))


def test_the_prefix_mounts_code_job_dir_and_checkpoints_and_runs_the_image() -> None:
    argv = _argv(_spec(environment={"image": "my/img:1"}))
    assert argv[:3] == ["podman", "run", "--rm"]
    assert "--network=host" in argv
    for vol in ("/code:/code:ro", "/jobs/.inject/lib:/jobs/.inject/lib:ro", "/jobs/a1:/jobs/a1"):
        assert f"--volume={vol}" in argv
    assert "--volume=/ckpt dir:/ckpt dir" in argv
    assert "--env=PYTHONPATH=/code:/jobs/.inject/lib" in argv
    assert "--env=CUDA_VISIBLE_DEVICES" in argv and "--env=SLURM_*" in argv
    assert {"--security-opt=no-new-privileges", "--cap-drop=all"} <= set(argv)
    assert argv[-2:] == ["--", "my/img:1"]


@pytest.mark.parametrize(
    ("environment", "gpu", "image"),
    [
        ({}, False, "detlab/pytorch:2.13.0-cpu"),
        ({}, True, "detlab/pytorch:2.13.0-cuda"),
        ({"image": {"cpu": "c:1", "cuda": "g:1"}}, True, "g:1"),
        ({"image": {"cpu": "c:1", "cuda": "g:1"}}, False, "c:1"),
    ],
)
def test_the_image_is_picked_as_the_docker_runtime_picks_it(
    environment: dict[str, Any], gpu: bool, image: str
) -> None:
    assert podman.image_of(environment, gpu) == image


def test_an_image_named_like_an_option_stays_an_image() -> None:
    argv = _argv(_spec(environment={"image": "--privileged"}))
    assert argv[-2:] == ["--", "--privileged"] and argv.count("--privileged") == 1


def test_bind_mounts_land_where_configured_and_clashes_are_refused() -> None:
    mounts = [
        {"host_path": "/data", "container_path": "/data", "read_only": True},
        {"host_path": "/scratch", "container_path": "scratch"},
    ]
    argv = _argv(_spec(bind_mounts=mounts))
    assert "--volume=/data:/data:ro" in argv
    assert "--volume=/scratch:/jobs/a1/work/scratch" in argv
    clash = [{"host_path": "/etc", "container_path": "/code"}]
    with pytest.raises(ValueError, match="two mounts at /code"):
        _argv(_spec(bind_mounts=clash))


def test_the_preamble_creates_the_checkpoint_dir_and_caps_nproc_at_pid_max() -> None:
    text = podman.preamble(_spec())
    assert "mkdir -p -- '/ckpt dir'" in text
    assert "mkdir -p --" not in podman.preamble(_spec(checkpoint_storage={}))
    out = subprocess.run(
        ["bash", "-c", text.replace("mkdir -p -- '/ckpt dir'", "") + "detlab_nproc"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    soft, hard = out.split(":")
    with open("/proc/sys/kernel/pid_max") as f:
        assert soft == hard and int(hard) <= int(f.read())


def _rootless(tmp_path: Path, uid: int, runtime: str = "") -> list[str]:
    """detlab_rootless as a job of `uid` would run it (`id` faked: the tests run as root)."""
    script = (
        f"id() {{ echo {uid}; }}\n{podman.ROOTLESS_FUNCTION}detlab_rootless\n"
        'echo "userns=${detlab_userns[*]}"; echo "run=$XDG_RUNTIME_DIR"'
    )
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path), "HOME": "/h"}
    if runtime:
        env["XDG_RUNTIME_DIR"] = runtime
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    return (out.stdout + out.stderr).splitlines()


def test_a_non_root_job_gets_keep_id_and_a_runtime_dir_of_its_own(tmp_path: Path) -> None:
    assert _rootless(tmp_path, 0) == ["userns=", "run="]
    mine = tmp_path / "detlab-run-4242"
    mine.mkdir(mode=0o700)
    os.chown(mine, 4242, 4242)
    assert _rootless(tmp_path, 4242) == ["userns=--userns=keep-id", f"run={mine}"]
    # one another user made first (here root) is refused, and so is an XDG_RUNTIME_DIR not ours
    theirs = tmp_path / "detlab-run-4343"
    theirs.mkdir(mode=0o700)
    lines = _rootless(tmp_path, 4343, runtime=str(tmp_path))
    assert f"[slurm] no runtime directory of user 4343 for rootless podman: {theirs}" in lines


def test_the_batch_script_runs_the_launcher_through_the_prefix() -> None:
    prefix = podman.podman_prefix(_spec(), "/jobs/a1", "/code", "/lib", False)
    script = cli.job_script("python3", "/code", "/jobs/a1", None, 1, prefix, "PRE\n")
    assert f"{prefix}python3 -m agent.slurm_job /jobs/a1/spec.json &" in script
    assert "PRE\n" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
