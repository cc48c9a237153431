"""The node monitor (docs/fault-tolerance.md): a silent node becomes NotReady, then Lost.

Level-triggered and idempotent: each cycle looks at the whole state. Every write is a
compare-and-set, so two copies of the monitor (two beat processes, a redelivered task) can
run at once and only the one whose UPDATE matched acts:

- `UPDATE node SET state='NotReady' WHERE id=… AND state='Ready' AND heartbeat_deadline < now`
  then, in the same transaction, its live pods → Unknown ("node not reachable");
- `UPDATE node SET state='Lost' WHERE id=… AND state='NotReady' AND last_heartbeat_at < cutoff`
  then its live pods → Lost (or, if the console had ordered them stopped, their `stop_as`
  status) and each affected job is reconciled (jobs.actions.workers.reconcile_job).

A heartbeat moves the node back to Ready and the agent's reports move Unknown pods back to
Running (jobs.actions.workers.apply_worker_state). A lost connection is not a dead process, so
nothing is declared lost before NODE_LOST_TIMEOUT.
"""

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from cluster.actions import mark_node_lost, mark_node_not_ready
from cluster.models import Node, NodeState
from jobs.actions.workers import end_pods_of_dead_nodes, mark_pods_unknown
from jobs.models import Pod, PodDesired
from policy.statuses import ACTIVE_POD_STATUSES

log = logging.getLogger(__name__)

NOT_REACHABLE = "node not reachable"


@dataclass
class NodeMonitorResult:
    not_ready: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    pods_unknown: int = 0
    pods_ended: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def _mark_not_ready(node_id: int, now: datetime, result: NodeMonitorResult) -> bool:
    with transaction.atomic():
        if not mark_node_not_ready(node_id, now):
            return False  # it heartbeated meanwhile, or another monitor got here first
        result.pods_unknown += mark_pods_unknown(node_id, NOT_REACHABLE)
    return True


def _mark_lost(node_id: int, now: datetime, cutoff: datetime, result: NodeMonitorResult) -> bool:
    with transaction.atomic():
        if not mark_node_lost(node_id, cutoff):
            return False
        result.pods_ended += end_pods_of_dead_nodes(Pod.objects.filter(node_id=node_id), now)
    return True


def run_node_monitor(now: datetime | None = None) -> NodeMonitorResult:
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.NODE_LOST_TIMEOUT)
    result = NodeMonitorResult()

    late = Node.objects.filter(state=NodeState.READY, heartbeat_deadline__lt=now)
    for node_id, name in late.values_list("id", "name"):
        try:
            if _mark_not_ready(node_id, now, result):
                log.warning("node %s is NotReady: no heartbeat since its deadline", name)
                result.not_ready.append(name)
        except Exception:  # one bad row must not stop the monitor for every other node
            log.exception("node monitor: marking node %s NotReady failed", name)

    silent = Node.objects.filter(state=NodeState.NOT_READY, last_heartbeat_at__lt=cutoff)
    for node_id, name in silent.values_list("id", "name"):
        try:
            if _mark_lost(node_id, now, cutoff, result):
                log.warning(
                    "node %s is Lost: silent for over %ss", name, settings.NODE_LOST_TIMEOUT
                )
                result.lost.append(name)
        except Exception:
            log.exception("node monitor: marking node %s Lost failed", name)

    # Safety net: a stop ordered to a pod on a node that is already Lost (or has no node)
    # would otherwise wait forever for an agent that will never answer.
    stranded = Pod.objects.filter(
        Q(node__state=NodeState.LOST) | Q(node__isnull=True),
        desired=PodDesired.STOP,
        status__in=list(ACTIVE_POD_STATUSES),
    )
    for job_id in sorted(set(stranded.values_list("job_id", flat=True))):
        try:
            with transaction.atomic():
                result.pods_ended += end_pods_of_dead_nodes(stranded.filter(job_id=job_id), now)
        except Exception:
            log.exception("node monitor: ending stopped pods of job %s failed", job_id)
    return result
