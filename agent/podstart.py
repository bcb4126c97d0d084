"""A task's first process in its Kubernetes pod (`python3 -m agent.podstart`).

The Kubernetes RM (master/rm/k8s) puts the allocation's start spec in the pod's environment
(DET_K8S_START_SPEC), and its credentials (the session token) in the pod's environment from the
allocation's Secret: this fetches the model definition with the allocation's session token,
extracts it into a fresh work directory, builds the task's environment the way every agent
runtime does (agent/runtime/_env.py: a container's GPUs are numbered from 0), and execs the
entrypoint in its place, so the pod's exit code and output are the task's own. A gang's pods
share one Job template: each learns its rank from the Job's completion index.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

from agent.modeldef import ModelDefError, extract_model_def
from agent.runtime._env import EnvLayout, task_env
from agent.runtime.process import alias_dir, build_argv, harness_root
from detlab.protocol import StartSpec
from harness.api import Session

SPEC_ENV = "DET_K8S_START_SPEC"


def _fetch_model_def(spec: StartSpec, master: str, workdir: Path, token: str | None) -> None:
    if not spec.model_def_url:
        return
    path = spec.model_def_url.removeprefix("/api/v1")
    resp = Session(master, token, timeout=120.0, outage_s=60.0).request("GET", path)
    data = resp.content
    sha = (spec.model_def_sha256 or "").lower()
    if sha and hashlib.sha256(data).hexdigest() != sha:
        raise ModelDefError("the model definition does not match its sha256")
    tar = workdir.parent / f".{workdir.name}.model_def.tar.gz"
    tar.write_bytes(data)
    try:
        extract_model_def(tar, workdir)
    finally:
        tar.unlink(missing_ok=True)


def prepare(environ: dict[str, str]) -> tuple[list[str], dict[str, str], Path]:
    """The argv, environment and work directory of the task this pod runs."""
    spec = StartSpec.parse(json.loads(environ[SPEC_ENV]))
    master = environ.get("DET_MASTER") or spec.env.get("DET_MASTER", "")
    workdir = Path(tempfile.mkdtemp(prefix="detlab-task-"))
    # The session token comes from the allocation's Secret (an env var of the pod, not in the
    # start spec, which anyone who can read the Job can read); the task inherits it.
    token = environ.get("DET_SESSION_TOKEN") or spec.env.get("DET_SESSION_TOKEN")
    _fetch_model_def(spec, master, workdir, token)
    root = harness_root()
    kind = "gpu" if environ.get("DET_K8S_SLOT_TYPE", "cuda") == "cuda" else "cpu"
    slots = [{"index": i, "type": kind} for i in spec.slot_indexes]
    inherited = {k: v for k, v in environ.items() if k != SPEC_ENV}
    layout = EnvLayout(
        inherited=inherited,
        code_dirs=(root or "", str(workdir), alias_dir(root)),
        default_pythonpath=environ.get("PYTHONPATH", ""),
        # `python3` in the entrypoint is the interpreter this launcher runs on (the image's).
        path_first=(os.path.dirname(sys.executable),),
        renumber_gpus=True,
    )
    node = environ.get("DET_K8S_NODE", "")
    env = task_env(spec, slots=slots, master_url=master, agent_id=node, layout=layout)
    # One template for the gang: the completion index is this pod's rank.
    env["DET_CONTAINER_RANK"] = environ.get("JOB_COMPLETION_INDEX", "0")
    return build_argv(spec.entrypoint), env, workdir


def main() -> int:
    try:
        argv, env, workdir = prepare(dict(os.environ))
    except (KeyError, ValueError, OSError, ModelDefError) as e:
        print(f"detlab: cannot start the task: {e}", file=sys.stderr, flush=True)
        return 1
    os.chdir(workdir)
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        print(f"detlab: cannot run {argv[0]}: {e}", file=sys.stderr, flush=True)
        return 127


if __name__ == "__main__":
    sys.exit(main())
