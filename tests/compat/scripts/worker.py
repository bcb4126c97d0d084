"""A worker of launcher.py: builds Determined's DistributedContext by hand."""

import logging
import os

import determined as det

logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
info = det.get_cluster_info()
rank, size = int(os.environ["MY_RANK"]), int(os.environ["MY_SIZE"])
distributed = det.core.DistributedContext(
    rank=rank,
    size=size,
    local_rank=rank,
    local_size=size,
    cross_rank=0,
    cross_size=1,
    chief_ip=info.container_addrs[0],
    pub_port=int(os.environ["MY_PORT"]),
)
with det.core.init(distributed=distributed) as core_context:
    ranks = core_context.distributed.allgather(rank)
    print(f"worker sees ranks {ranks}", flush=True)
    if rank == 0:
        core_context.train.report_validation_metrics(
            steps_completed=1, metrics={"loss": 0.5, "workers": len(ranks)}
        )
        with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
            (path / "ranks.txt").write_text(str(ranks))
