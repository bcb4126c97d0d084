"""Determined 0.38's current core_v2 forms, written for this project: `core_v2.Config`,
`init_context` as a context manager, a directory as `checkpoint_storage`,
`core_v2.info._trial_info` and `url_reverse_webui_exp_view()`. MODE picks the form:
`singleton` (init/close), `context` (init_context), `fail` (raises inside init_context)."""

import os
import pathlib

try:
    from determined.experimental import core_v2
except ImportError:  # off the cluster: the one line a Determined user changes
    from harness.experimental import core_v2

MODE = os.environ.get("MODE", "singleton")
config = core_v2.Config(
    name=f"config-{MODE}",
    hparams={"lr": 0.25},
    labels=["unmanaged"],
    checkpoint_storage=os.environ["CKPT_DIR"],
    external_experiment_id="ext-1",
)


def train(ctx, info):
    print("experiment", info._trial_info.experiment_id, "hparams", info.trial.hparams, flush=True)
    for step in range(0, 4):
        ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / (step + 1)})
    ctx.train.report_validation_metrics(steps_completed=3, metrics={"loss": 0.25})
    with ctx.checkpoint.store_path({"steps_completed": 3}) as (path, uuid):
        (pathlib.Path(path) / "state").write_text("3")
    if MODE == "fail":
        raise ValueError("oops")


if MODE == "singleton":
    core_v2.init(config=config)
    print("web page:", core_v2.url_reverse_webui_exp_view(), flush=True)
    train(core_v2, core_v2.info)
    core_v2.close()
else:
    with core_v2.init_context(config=config) as core_context:
        train(core_context, core_context.info)
