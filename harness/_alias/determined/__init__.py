"""`determined` on a detlab cluster: an alias of detlab's `harness` (see harness/_determined.py).

Put on trials' PYTHONPATH by det-agent's runtimes only; never installed globally, so a real
Determined installation elsewhere on the machine is never shadowed.
"""

from harness import *  # noqa: F403
from harness import LOG_FORMAT, ClusterInfo, InvalidHP, TrialInfo, core, get_cluster_info
from harness._determined import install as _install

_install()

__all__ = ["LOG_FORMAT", "ClusterInfo", "InvalidHP", "TrialInfo", "core", "get_cluster_info"]
