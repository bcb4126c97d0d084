"""Launchers: start the workers of a trial.

- `python3 -m harness.launch module:TrialClass` runs a `harness.pytorch.PyTorchTrial`: in this
  process for one slot, as one torch.distributed worker per slot otherwise (what the master runs
  for an entrypoint of that form).
- `python3 -m harness.launch.torch_distributed [--nproc N] [--] CMD ARGS...` starts one copy of a
  Core API script per slot with torch.distributed's environment (`RANK`, `LOCAL_RANK`,
  `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`); `harness.core.init()` then joins the process group.

Across several containers (agents), each container's launcher posts its address to the master's
rendezvous; container 0 hosts the torch.distributed store that every worker connects to.
"""

from harness.launch._spawn import Workers, launch_workers, plan_workers

__all__ = ["Workers", "launch_workers", "plan_workers"]
