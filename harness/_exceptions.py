"""Exceptions a user's training code raises to talk to the harness."""

from __future__ import annotations


class InvalidHP(Exception):
    """Raise inside `with harness.core.init()` when the hyperparameters cannot work.

    The context reports an early exit (`INVALID_HP`) to the master, which tells the searcher to
    drop this trial instead of counting it as an error, and the process exits 0.
    """
