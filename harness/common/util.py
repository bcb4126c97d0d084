"""`determined.common.util`: the names Determined 0.38's examples import (the metric group
names of its legacy reports) and `merge_dicts`."""

from harness.util import merge_dicts

_LEGACY_TRAINING = "training"
_LEGACY_VALIDATION = "validation"

__all__ = ["_LEGACY_TRAINING", "_LEGACY_VALIDATION", "merge_dicts"]
