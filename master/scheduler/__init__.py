"""Pure scheduling: queued requests + free slots -> assignments + preemptions (no I/O).

A request gets all of its slots at once (gang scheduling) or waits. `schedule` runs one pass over
one resource pool with its policy (`priority` or `fair_share`, optional preemption, best or worst
fit); `queue_order` lists the pool's jobs in the order the scheduler considers them.
"""

from master.scheduler.api import queue_order, schedule
from master.scheduler.fair_share import fair_shares
from master.scheduler.fitting import SlotIndex
from master.scheduler.priority import schedule_priority
from master.scheduler.types import (
    AgentView,
    Assignment,
    Decision,
    PoolPolicy,
    Request,
    Running,
)

__all__ = [
    "AgentView",
    "Assignment",
    "Decision",
    "PoolPolicy",
    "Request",
    "Running",
    "SlotIndex",
    "fair_shares",
    "queue_order",
    "schedule",
    "schedule_priority",
]
