"""The scheduler: a pure `plan()` over a snapshot, and the cycle that applies it
(docs/scheduling.md).

`policy.scheduler.plan.plan` decides; `jobs.scheduler.cycle.run_cycle` loads, locks and writes.
Import the cycle from its module: this package stays importable without Django set up, so the
simulator and benchmarks can use the pure core alone.
"""

from policy.scheduler.model import (
    Admission,
    ChargeHome,
    ChargeMove,
    JobSnap,
    NodeSnap,
    Placement,
    Plan,
    Preemption,
    QueueDecision,
    QuotaSnap,
    RunningSnap,
    Snapshot,
)
from policy.scheduler.plan import PlanOptions, plan

__all__ = [
    "Admission",
    "ChargeHome",
    "ChargeMove",
    "JobSnap",
    "NodeSnap",
    "Placement",
    "Plan",
    "PlanOptions",
    "Preemption",
    "QueueDecision",
    "QuotaSnap",
    "RunningSnap",
    "Snapshot",
    "plan",
]
