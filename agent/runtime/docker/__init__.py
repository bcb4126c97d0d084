"""The `docker` runtime: one container per allocation, through the Docker SDK.

- The image is `environment.image`, or the default image for the slot type (agent/images) when
  the experiment names none (pulled when missing, or always with `force_pull_image`); an
  image that cannot be had fails the allocation at once with a message in the trial's logs.
- The harness and its pure-Python dependencies are injected (a read-only mount, see _inject.py),
  so any image with `python3` and `/bin/sh` works. The model directory is copied into the
  container's working directory, `/run/determined/workdir`. An optional `startup-hook.sh` there
  is sourced before the entrypoint runs.
- Environment: `environment.environment_variables` < the master's `DET_*` < the agent's own
  (`DET_MASTER` = the container master URL, `DET_AGENT_ID`, `CUDA_VISIBLE_DEVICES`, PYTHONPATH).
- Mounts: `bind_mounts`, and a shared_fs checkpoint storage's `host_path` at the same path, so
  checkpoints land where the master expects them.
- GPUs: a device request for exactly the allocation's GPUs (by UUID); CPU slots get none and
  `NVIDIA_VISIBLE_DEVICES=void`, so a `nvidia` default runtime exposes no GPU either.
- Output is streamed from the engine's log (one connection per container, both streams, with
  the engine's timestamps) to the master as it happens.
- A kill is `docker stop` with the agent's kill grace (SIGTERM, then SIGKILL); a container runs
  under the engine's init, so the trial gets the SIGTERM even though it is PID 1's child.
- Containers are labelled with agent, allocation, trial and experiment. They are removed once
  the master has seen their exit, except the last `keep_failed` failed ones (for debugging).
- Restart: an agent that starts while its containers run re-attaches to them before its first
  poll (so the master sees them RUNNING; it kills those it no longer wants), and resumes their
  log streams exactly after the last line the master received: the position (engine timestamp,
  frames at that timestamp) of the last *delivered* line is kept in `<work-dir>/docker/<id>.json`.
  An agent killed after the master stored a batch but before it saved that position would send
  the batch again, so a re-attached stream first asks the master for the allocation's newest
  lines and drops the re-read lines it already has (`ResentLines`).
"""

from agent.runtime.docker._common import (
    LIB_DIR,
    WORKDIR,
    DockerOptions,
    DockerUnavailable,
    _checked_model_def,
)
from agent.runtime.docker._logpos import (
    FrameFilter,
    LineAssembler,
    LogPos,
    ResentLines,
    _LogState,
    iso_us,
    parse_ts,
)
from agent.runtime.docker.runtime import DockerRuntime

__all__ = [
    "LIB_DIR",
    "WORKDIR",
    "DockerOptions",
    "DockerRuntime",
    "DockerUnavailable",
    "FrameFilter",
    "LineAssembler",
    "LogPos",
    "ResentLines",
    "_LogState",
    "_checked_model_def",
    "iso_us",
    "parse_ts",
]
