"""What a detlab Slurm job runs: start one allocation's task on this node, as an agent would.

    python -m agent.slurm_job JOB_DIR/spec.json

The spec file (written 0600 by the master) holds the allocation's `StartSpec`, the master's URL
and the RM's name. The task gets the environment the process runtime gives it (one builder:
agent/runtime/_env.py), with the GPUs Slurm gave this job (CUDA_VISIBLE_DEVICES) as its slots.
Output goes to the job's output file, which the master ships into the task's logs; the batch
script records this process's exit code in the job's status file.

A trial spanning several nodes runs one launcher per node (the batch script's `srun`): each is
one container of the allocation, its rank Slurm's task number (SLURM_PROCID), and the harness's
launchers meet through the master's rendezvous (master/rm/slurm_gang.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from agent.modeldef import ModelDefError, extract_model_def
from agent.netif import interface_ipv4, rendezvous_env
from agent.runtime._env import EnvLayout, task_env
from agent.runtime.process import alias_dir, build_argv, harness_root
from detlab.constants import SLURM_NOTICE_FILE
from detlab.protocol import StartSpec


def slurm_gpus(env: dict[str, str]) -> list[int]:
    """The GPU indexes Slurm gave this job (`--gres`/`--gpus` set CUDA_VISIBLE_DEVICES)."""
    raw = env.get("CUDA_VISIBLE_DEVICES", "")
    return [int(x) for x in raw.split(",") if x.strip().isdigit()]


def container_rank(spec: StartSpec, env: dict[str, str]) -> int:
    """This node's container rank: Slurm's task number under the gang's `srun` (0 for the
    batch script itself). A rank the allocation has no container for is refused."""
    raw = env.get("SLURM_PROCID", "0")
    count = int(spec.env.get("DET_NUM_CONTAINERS") or 1)
    if not raw.isdigit() or int(raw) >= count:
        raise ValueError(f"Slurm task {raw!r} is not one of the allocation's {count} container(s)")
    return int(raw)


def local_spec(
    spec: StartSpec, gpus: list[int], rank: int = 0
) -> tuple[StartSpec, list[dict[str, Any]]]:
    """The spec with this node's GPUs as its slots (the master booked none: Slurm did) and
    this node's container rank."""
    env = dict(spec.env)
    if gpus:
        env["DET_SLOT_IDS"] = json.dumps(gpus)
    if "DET_CONTAINER_RANK" in env or rank:
        env["DET_CONTAINER_RANK"] = str(rank)
    slots = [{"index": i, "type": "gpu"} for i in gpus]
    fields = {**spec.__dict__, "slot_indexes": tuple(gpus), "env": env}
    return StartSpec(**fields), slots


def _fetch_model_def(spec: StartSpec, master_url: str, path: Path) -> Path | None:
    if not spec.model_def_url:
        return None
    from harness.api import Session

    token = spec.env.get("DET_SESSION_TOKEN")
    session = Session(master_url, token, timeout=120.0)
    body = session.request("GET", spec.model_def_url.removeprefix("/api/v1")).content
    path.write_bytes(body)
    return path


def main(argv: list[str]) -> int:
    spec_path = Path(argv[1])
    job_dir = spec_path.parent
    doc = json.loads(spec_path.read_text())
    parsed = StartSpec.parse(doc["spec"])
    try:
        rank = container_rank(parsed, dict(os.environ))
    except ValueError as e:
        print(f"[slurm] cannot start allocation {parsed.allocation_id}: {e}", flush=True)
        return 1
    spec, slots = local_spec(parsed, slurm_gpus(dict(os.environ)), rank)
    count = int(spec.env.get("DET_NUM_CONTAINERS") or 1)
    if count > 1:
        node = os.environ.get("SLURMD_NODENAME", "?")
        print(f"[slurm] node {node}: container {rank} of {count}", flush=True)
    # The job directory is on storage every node shares: each node's launcher works apart.
    workdir = job_dir / ("work" if count == 1 else f"work.{rank}")
    shutil.rmtree(workdir, ignore_errors=True)  # a rerun starts from the model def again
    workdir.mkdir(mode=0o700)
    try:
        tarball = _fetch_model_def(spec, doc["master_url"], job_dir / f"{workdir.name}.tar.gz")
        if tarball is not None:
            extract_model_def(tarball, workdir)
            tarball.unlink()
        argv_task = build_argv(spec.entrypoint)
    except (ModelDefError, ValueError, OSError) as e:
        print(f"[slurm] cannot prepare allocation {spec.allocation_id}: {e}", flush=True)
        return 1
    root = harness_root()
    inherited = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    layout = EnvLayout(
        inherited=inherited,
        code_dirs=(root or "", str(workdir), alias_dir(root)),
        path_first=(os.path.dirname(sys.executable),),
    )
    env = task_env(
        spec, slots=slots, master_url=doc["master_url"], agent_id=doc["agent_id"], layout=layout
    )
    iface = doc.get("rendezvous_network_interface")
    if iface:
        node = os.environ.get("SLURMD_NODENAME", "?")
        address = interface_ipv4(str(iface))
        if address is None:
            print(
                f"[slurm] rendezvous_network_interface {iface!r}: no such network interface "
                f"with an IPv4 address on node {node}",
                flush=True,
            )
            return 1
        print(f"[slurm] node {node}: rendezvous on {iface} at {address}", flush=True)
        env.update(rendezvous_env(str(iface), address))
    try:
        proc = subprocess.Popen(argv_task, cwd=workdir, env=env, start_new_session=True)
    except OSError as e:
        print(f"[slurm] cannot start the entrypoint {spec.entrypoint!r}: {e}", flush=True)
        return 127 if isinstance(e, FileNotFoundError) else 126

    def forward(signum: int, _frame: FrameType | None) -> None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    def notice(_signum: int, _frame: FrameType | None) -> None:
        # Slurm wants the job back (a higher-priority partition, or its time limit is near).
        # The trial would die of a raw USR1; the master, which reads this file, asks it to
        # checkpoint and exit the way every preemption is asked.
        (job_dir / SLURM_NOTICE_FILE).touch()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    signal.signal(signal.SIGUSR1, notice)
    code = proc.wait()
    try:  # nothing of the task outlives it
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    shutil.rmtree(workdir, ignore_errors=True)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
