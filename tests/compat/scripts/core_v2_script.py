"""A Determined 0.38 core_v2 script: the same file runs managed (on the cluster, where
`determined` is detlab's harness) and unmanaged (off the cluster, `import harness`)."""

import json
import os
import pathlib
import sys

try:
    from determined.experimental import core_v2
except ImportError:  # off the cluster: the one line a Determined user changes
    from harness.experimental import core_v2

storage = os.environ.get("CKPT_DIR")
core_v2.init(
    defaults=core_v2.DefaultConfig(
        name="core-v2-run",
        hparams={"lr": 0.5, "steps": 6},
        checkpoint_storage={"type": "shared_fs", "host_path": storage} if storage else None,
    ),
    unmanaged=core_v2.UnmanagedConfig(external_experiment_id="notebook-7"),
)
assert core_v2.train is not None and core_v2.checkpoint is not None
loss = 1.0
for step in range(1, 7):
    loss *= 0.5
    core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": loss})
core_v2.train.report_validation_metrics(steps_completed=6, metrics={"loss": loss})
with core_v2.checkpoint.store_path({"steps_completed": 6}) as (path, uuid):
    (pathlib.Path(path) / "state.json").write_text(json.dumps({"loss": loss}))
print("core_v2 run done", flush=True)
if os.environ.get("FAIL_AT_END"):
    raise RuntimeError("the script failed after training")
core_v2.close()
sys.exit(0)
