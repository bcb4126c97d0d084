"""`container_run_type: podman`: the `podman run` a Slurm job's launcher is started through
(pure: no I/O; master/rm/slurm.py writes it into the batch script).

The launcher (`python3 -m agent.slurm_job`) runs inside a container of the experiment's
`environment.image` (default: the project's default image) the way the Docker runtime runs a
trial: detlab's code (agent, harness, detlab) is mounted read-only at its own path together with
the injected pure-Python dependencies (agent/runtime/_inject.py), so any image with a `python3`
runs trials. The job directory and a shared_fs checkpoint storage are mounted at their own paths
(every path in the spec stays valid), bind_mounts as configured; networking is the host's (the
job reaches the master at the URL it was given), the user is the job's own (`id -u`/`id -g` of
the Slurm job, itself run as the linked Unix user), and Slurm's variables (CUDA_VISIBLE_DEVICES
for the GPUs it gave, SLURM_PROCID for a gang's rank) are passed on.
"""

from __future__ import annotations

import shlex
from typing import Any

from agent.images import default_image

# Where relative bind_mounts' container paths land: the launcher's work dir (agent/slurm_job.py).
WORK_SUBDIR = "work"


def image_of(environment: dict[str, Any], gpu: bool) -> str:
    """The image, as the Docker runtime picks it (agent/runtime/docker/_build.py)."""
    image = environment.get("image")
    if isinstance(image, dict):  # Determined's per-device form
        image = (
            image.get("cuda" if gpu else "cpu")
            or image.get("gpu")
            or next((v for v in image.values() if v), None)
        )
    return str(image or default_image(gpu))


def _volumes(spec: dict[str, Any], job_dir: str, code_root: str, lib: str) -> list[str]:
    vols = [f"{code_root}:{code_root}:ro", f"{lib}:{lib}:ro", f"{job_dir}:{job_dir}"]
    targets = {code_root, lib, job_dir}
    ckpt = _checkpoint_dir(spec)
    if ckpt:
        vols.append(f"{ckpt}:{ckpt}")
        targets.add(ckpt)
    for bm in spec.get("bind_mounts") or []:
        target = str(bm["container_path"])
        if not target.startswith("/"):
            target = f"{job_dir}/{WORK_SUBDIR}/{target}"
        if target in targets:
            raise ValueError(f"two mounts at {target}")
        targets.add(target)
        vols.append(f"{bm['host_path']}:{target}" + (":ro" if bm.get("read_only") else ""))
    return vols


def podman_prefix(spec: dict[str, Any], job_dir: str, code_root: str, lib: str, gpu: bool) -> str:
    """Shell text that, put before `python3 -m agent.slurm_job SPEC`, runs it in a container.

    The ulimits are the job's own: podman running as root asks runc for 1048576 open files and
    4194304 processes by default, which a node without CAP_SYS_RESOURCE (a VM or a container
    itself, as where detlab's tests run) refuses with "error setting rlimits ... operation not
    permitted"; podman lowers its own process limit to kernel.pid_max first, hence the cap.
    """
    q = shlex.quote
    pythonpath = f"{code_root}:{lib}"
    argv = [
        "podman",
        "run",
        "--rm",
        "--network=host",
        f"--name=detlab-{spec['allocation_id']}",
        f"--workdir={job_dir}",
        f"--env=PYTHONPATH={pythonpath}",
        "--env=CUDA_VISIBLE_DEVICES",
        "--env=SLURM_*",
        "--env=SLURMD_NODENAME",
        # The image and the bind mounts are the experiment's: with rootful Podman, an image
        # whose setuid binary made its user root would be root on whatever it mounted.
        "--security-opt=no-new-privileges",
        "--cap-drop=all",
    ]
    argv += [f"--volume={v}" for v in _volumes(spec, job_dir, code_root, lib)]
    limits = (
        '"${detlab_userns[@]}" --user="$(id -u):$(id -g)" '
        '--ulimit=nofile="$(ulimit -Sn):$(ulimit -Hn)" --ulimit=nproc="$(detlab_nproc)"'
    )
    image = image_of(spec.get("environment") or {}, gpu)
    # `--`: an image named like an option ("--privileged") is an image, never an option.
    return " ".join(q(a) for a in argv) + f" {limits} -- {q(image)} "


def _checkpoint_dir(spec: dict[str, Any]) -> str | None:
    storage = spec.get("checkpoint_storage") or {}
    host_path = storage.get("host_path")
    return str(host_path) if storage.get("type", "shared_fs") == "shared_fs" and host_path else None


def preamble(spec: dict[str, Any]) -> str:
    """What the batch script runs before the prefix: podman refuses to mount a path that does
    not exist, and the checkpoint storage's appears with the first checkpoint; detlab_nproc
    gives the process limit (see podman_prefix)."""
    ckpt = _checkpoint_dir(spec)
    mkdir = f"mkdir -p -- {shlex.quote(ckpt)}\n" if ckpt else ""
    return mkdir + NPROC_FUNCTION + ROOTLESS_FUNCTION + "detlab_rootless\n"


NPROC_FUNCTION = """detlab_nproc() {
  local n m; n=$(ulimit -Hu); m=$(cat /proc/sys/kernel/pid_max)
  if [ "$n" = unlimited ] || [ "$n" -gt "$m" ]; then n=$m; fi
  echo "$n:$n"
}
"""

# A rootless Podman needs a HOME (its configuration and image store are found there, as for a
# login) and an XDG_RUNTIME_DIR of its own (its locks and the container's state): the job's
# --export=NONE environment has neither. /run/user/UID is used when the node's logind made it;
# otherwise a private directory under TMPDIR, refused if it is not a directory the job user owns
# (another user could have made it first to read the containers' state). A refusal is printed
# and Podman's own error then ends the job with it in the trial's log.
ROOTLESS_FUNCTION = """detlab_rootless() {
  detlab_userns=()
  local uid d; uid=$(id -u)
  [ "$uid" -eq 0 ] && return 0
  detlab_userns=(--userns=keep-id)
  [ -n "${HOME:-}" ] || export HOME="$(getent passwd "$uid" | cut -d: -f6)"
  d=${XDG_RUNTIME_DIR:-/run/user/$uid}
  if [ ! -d "$d" ] || [ -L "$d" ] || [ "$(stat -c %u "$d")" != "$uid" ]; then
    d=${TMPDIR:-/tmp}/detlab-run-$uid
    mkdir -m 700 -p -- "$d" 2>/dev/null
  fi
  if [ ! -d "$d" ] || [ -L "$d" ] || [ "$(stat -c %u:%a "$d")" != "$uid:700" ]; then
    echo "[slurm] no runtime directory of user $uid for rootless podman: $d" >&2
  fi
  export XDG_RUNTIME_DIR=$d
}
"""
