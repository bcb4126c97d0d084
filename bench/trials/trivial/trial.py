"""Benchmark trial: as little work as a trial can do through the whole Core API loop.

For each searcher operation: one training-metric report per batch up to the operation's length
(10 with max_length {batches: 10}), one validation report, then report_completed.
"""

import harness as det

info = det.get_cluster_info()
x = float(info.trial.hparams.get("x", 0.0)) if info else 0.0

with det.core.init() as core:
    done = 0
    for op in core.searcher.operations():
        for step in range(done + 1, op.length + 1):
            core.train.report_training_metrics(step, {"loss": x + 1.0 / step})
        done = op.length
        loss = x + 1.0 / max(done, 1)
        core.train.report_validation_metrics(done, {"loss": loss})
        op.report_completed(loss)
