"""A Core API trial without torch: one validation and one checkpoint per step, losses from the
`losses` hyperparameter (so the GC keep rule's answer is known in advance)."""

from __future__ import annotations

import logging

import harness as det


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    assert info is not None
    losses = info.trial.hparams["losses"]
    with det.core.init() as core:
        for op in core.searcher.operations():
            for step, loss in enumerate(losses[: op.length], start=1):
                core.train.report_training_metrics(step, {"loss": loss})
                core.train.report_validation_metrics(step, {"loss": loss})
                with core.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
                    (path / "w.bin").write_bytes(bytes([step]) * 100)
                logging.info("checkpoint %s at step %d", uuid, step)
                op.report_progress(step)
            op.report_completed(losses[op.length - 1])


if __name__ == "__main__":
    main()
