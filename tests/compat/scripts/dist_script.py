"""Determined 0.38's distributed Core API pattern (tutorial stage 4), unchanged: started by
`python3 -m determined.launch.torch_distributed -- python3 dist_script.py`; metrics and
checkpoints from the chief only (`shard=False`), a sharded checkpoint at the end."""

import json
import logging
import pathlib

import determined as det
import torch.distributed


def main(core_context, info):
    dist = core_context.distributed
    hp = info.trial.hparams
    steps, end, every = 0, hp.get("max_length", 8), hp.get("every", 4)
    if info.latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            steps = json.loads((pathlib.Path(path) / "state.json").read_text())["steps"]
    x = 0
    while steps < end:
        steps += 1
        x += dist.rank + 1
        if steps % every == 0:
            total = sum(dist.allgather(x))
            if dist.rank == 0:
                core_context.train.report_training_metrics(
                    steps_completed=steps, metrics={"x": total}
                )
                with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, u):
                    (pathlib.Path(path) / "state.json").write_text(json.dumps({"steps": steps}))
                print(f"chief checkpoint {u} at {steps}", flush=True)
            if core_context.preempt.should_preempt():
                return
    if dist.rank == 1:
        try:
            with core_context.checkpoint.store_path({"steps_completed": steps}):
                pass
        except RuntimeError as e:
            print(f"non-chief store_path refused: {e}", flush=True)
    with core_context.checkpoint.store_path({"steps_completed": steps}, shard=True) as (path, u):
        (pathlib.Path(path) / f"rank-{dist.rank}.txt").write_text(str(x))
    if dist.rank == 0:
        print(f"sharded checkpoint {u}", flush=True)
        core_context.train.report_validation_metrics(
            steps_completed=steps, metrics={"loss": 1.0 / (1 + steps)}
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    torch.distributed.init_process_group("gloo")
    distributed = det.core.DistributedContext.from_torch_distributed()
    with det.core.init(distributed=distributed) as core_context:
        main(core_context, info)
