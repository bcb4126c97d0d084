"""Determined 0.38's `determined.transformers`: `DetCallback` for the Hugging Face Trainer.

Needs the `hf` extra (transformers); importing it without transformers says so.
"""

from harness.transformers._callback import DetCallback

__all__ = ["DetCallback"]
