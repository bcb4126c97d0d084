"""What researchers import: the Core API, Trial classes, the REST client and the det CLI.

Drop-in for Determined's Core API: `import harness as det`. Only the standard library and
`requests` are imported here (the harness is injected into arbitrary training containers).
"""

from harness import core
from harness._exceptions import InvalidHP
from harness._info import ClusterInfo, TrialInfo, get_cluster_info

LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

__all__ = ["LOG_FORMAT", "ClusterInfo", "InvalidHP", "TrialInfo", "core", "get_cluster_info"]
