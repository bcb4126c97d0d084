"""A Core API script with DeepSpeed, as Determined 0.38 users wrote it: started by
`python3 -m determined.launch.deepspeed -- python3 ds_core_script.py`, the process group from
deepspeed.init_distributed, `DistributedContext.from_deepspeed()`, and the engine's
save_checkpoint writing every rank's ZeRO shard into one sharded checkpoint."""

import logging

import deepspeed
import determined as det
import torch
from torch import nn


def main(core_context, info):
    hp = info.trial.hparams
    rank = core_context.distributed.rank
    model = nn.Linear(4, 1)
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Adam", "params": {"lr": 0.1, "torch_adam": True}},
        "zero_optimization": {"stage": 1},
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    steps = 0
    if info.latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            _, client = engine.load_checkpoint(str(path), tag="ds")
            steps = client["steps"]
    g = torch.Generator().manual_seed(rank)
    end = hp["steps"]
    while steps < end:
        x = torch.randn(2, 4, generator=g)
        loss = engine(x).pow(2).mean()
        engine.backward(loss)
        engine.step()
        steps += 1
    losses = core_context.distributed.allgather(loss.item())
    if rank == 0:
        core_context.train.report_training_metrics(
            steps_completed=steps, metrics={"loss": sum(losses) / len(losses)}
        )
        core_context.train.report_validation_metrics(
            steps_completed=steps, metrics={"loss": sum(losses) / len(losses)}
        )
    with core_context.checkpoint.store_path({"steps_completed": steps}, shard=True) as (path, u):
        engine.save_checkpoint(str(path), tag="ds", client_state={"steps": steps})
    ranks = core_context.distributed.allgather(deepspeed.comm.get_rank())
    if rank == 0:
        print(f"deepspeed ranks {ranks} world {deepspeed.comm.get_world_size()}", flush=True)
        print(f"checkpoint {u} at {steps}", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    deepspeed.init_distributed(dist_backend="gloo")
    distributed = det.core.DistributedContext.from_deepspeed()
    with det.core.init(distributed=distributed) as core_context:
        main(core_context, det.get_cluster_info())
