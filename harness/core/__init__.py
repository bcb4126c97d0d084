"""The Core API (Determined's names): `init()` returns a `Context` with train, searcher,
checkpoint, preempt and distributed sub-contexts."""

from harness.core._checkpoint import CheckpointContext, DownloadMode
from harness.core._context import Context, init
from harness.core._distributed import DistributedContext, DummyDistributedContext
from harness.core._preempt import PreemptContext, PreemptMode
from harness.core._searcher import SearcherContext, SearcherMode, SearcherOperation
from harness.core._train import EarlyExitReason, TensorboardMode, TrainContext

__all__ = [
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "DummyDistributedContext",
    "EarlyExitReason",
    "PreemptContext",
    "PreemptMode",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "init",
]
