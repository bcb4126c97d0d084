"""A Core API script written the way Determined 0.38's tutorials write them (no detlab names).

It trains `max_length` (hyperparameter, default 20) fake batches, reports training metrics and
a checkpoint every `every` batches, validates at the end (`loss` = 1 / (1 + lr * steps)),
resumes from `latest_checkpoint`, and honours preemption. With `use_ops: true` it drives the
training length from the deprecated `core_context.searcher.operations()` instead. With
`fail_at: N` a first run (not resumed from a checkpoint) crashes right after its checkpoint at
batch N; a resumed run goes on.
"""

import json
import logging
import os
import pathlib
import time

import determined as det


def load_state(core_context, latest_checkpoint, trial_id):
    if latest_checkpoint is None:
        return 0
    with core_context.checkpoint.restore_path(latest_checkpoint) as path:
        state = json.loads((pathlib.Path(path) / "state.json").read_text())
    # As Determined's Core API tutorial does: another trial's checkpoint (a warm start) is only
    # where the weights come from; this trial's own counts its steps on.
    if state.get("trial_id", trial_id) != trial_id:
        print(f"checkpoint of trial {state['trial_id']}, not {trial_id}: from 0", flush=True)
        return 0
    print(f"resumed from {latest_checkpoint} at {state['steps']}", flush=True)
    return state["steps"]


def save(core_context, steps, trial_id):
    with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, uuid):
        state = {"steps": steps, "trial_id": trial_id}
        (pathlib.Path(path) / "state.json").write_text(json.dumps(state))
    print(f"checkpoint {uuid} at {steps}", flush=True)


def train(core_context, start, end, hparams, trial_id):
    lr, every, sleep = hparams.get("lr", 1.0), hparams.get("every", 5), hparams.get("sleep", 0)
    steps = start
    while steps < end:
        steps += 1
        time.sleep(sleep)
        if steps % every == 0 or steps == end:
            loss = 1.0 / (1.0 + lr * steps)
            core_context.train.report_training_metrics(
                steps_completed=steps, metrics={"loss": loss}
            )
            save(core_context, steps, trial_id)
            if start == 0 and steps == hparams.get("fail_at"):
                raise RuntimeError(f"failing at {steps}, as asked (fail_at)")
            if core_context.preempt.should_preempt():
                print(f"preempted at {steps}", flush=True)
                return steps, False
    return steps, True


def main(core_context, info):
    hparams, trial_id = info.trial.hparams, info.trial.trial_id
    steps = load_state(core_context, info.latest_checkpoint, trial_id)
    if hparams.get("use_ops"):
        for op in core_context.searcher.operations():
            steps, done = train(core_context, steps, op.length, hparams, trial_id)
            if not done:
                return
            loss = 1.0 / (1.0 + hparams.get("lr", 1.0) * steps)
            core_context.train.report_validation_metrics(
                steps_completed=steps, metrics={"loss": loss}
            )
            op.report_completed(loss)
        return
    steps, done = train(core_context, steps, hparams.get("max_length", 20), hparams, trial_id)
    if done:
        loss = 1.0 / (1.0 + hparams.get("lr", 1.0) * steps)
        core_context.train.report_validation_metrics(steps_completed=steps, metrics={"loss": loss})
        print(f"done at {steps} loss {loss}", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    assert info is not None, "this script runs on the cluster"
    print(
        f"imported determined from {det.__file__}; rank {os.environ.get('RANK', '0')}", flush=True
    )
    distributed = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        distributed = det.core.DistributedContext.from_torch_distributed()
    with det.core.init(distributed=distributed) as core_context:
        main(core_context, info)
