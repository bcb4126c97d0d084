"""Benchmark trial: prints one line as soon as it starts, then completes its searcher operation."""

print("bench-hello", flush=True)  # first thing, before any import: marks "the process runs"

import harness as det  # noqa: E402

with det.core.init() as core:
    for op in core.searcher.operations():
        op.report_completed(0.0)
