"""The node monitor (DESIGN §6): a silent node becomes NotReady, then Lost.

Level-triggered and idempotent: each cycle looks at the whole state. Every write is a
compare-and-set, so two copies of the monitor (two beat processes, a redelivered task) can
run at once and only the one whose UPDATE matched acts:

- `UPDATE node SET state='NotReady' WHERE id=… AND state='Ready' AND heartbeat_deadline < now`
  then, in the same transaction, its live pods → Unknown ("node not reachable");
- `UPDATE node SET state='Lost' WHERE id=… AND state='NotReady' AND last_heartbeat_at < cutoff`
  then its live pods → Lost (or, if the console had ordered them stopped, their `stop_as`
  status) and each affected job is reconciled (jobs.podsync.reconcile_job).

A heartbeat moves the node back to Ready and the agent's reports move Unknown pods back to
Running (jobs.podsync.apply_worker_state). A lost connection is not a dead process, so
nothing is declared lost before NODE_LOST_TIMEOUT.
"""

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from agents.models import Node, NodeState
from jobs.models import Pod, PodDesired
from jobs.podsync import reconcile_job
from jobs.statuses import ACTIVE_POD_STATUSES, PodStatus

log = logging.getLogger(__name__)

NOT_REACHABLE = "node not reachable"
NODE_LOST = "node lost"


@dataclass
class MonitorResult:
    not_ready: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    pods_unknown: int = 0
    pods_ended: int = 0


def _end_pods(pods, now: datetime) -> int:
    """End live pods of dead nodes and reconcile their jobs, in the caller's transaction.

    Ordered stops end as ordered (a stop never hangs on a dead node, and a user's stop still
    ends the job Stopped); the rest end Lost. Reconciling in the same transaction keeps this
    level-triggered: if it fails, nothing is committed and the next cycle tries again."""
    rows = list(pods.filter(status__in=list(ACTIVE_POD_STATUSES)).values_list("id", "job_id"))
    if not rows:
        return 0
    ordered_stop = Q(desired=PodDesired.STOP) & ~Q(stop_as="")
    ended = Pod.objects.filter(
        pk__in=[pk for pk, _ in rows], status__in=list(ACTIVE_POD_STATUSES)
    ).update(
        status=Case(When(ordered_stop, then=F("stop_as")), default=Value(PodStatus.LOST)),
        status_reason=Case(When(ordered_stop, then=F("stop_reason")), default=Value(NODE_LOST)),
        finished_at=now,
    )
    for job_id in sorted({job_id for _, job_id in rows}):
        reconcile_job(job_id, now=now)
    return ended


def _mark_not_ready(node_id: int, now: datetime, result: MonitorResult) -> bool:
    with transaction.atomic():
        claimed = Node.objects.filter(
            pk=node_id, state=NodeState.READY, heartbeat_deadline__lt=now
        ).update(state=NodeState.NOT_READY)
        if not claimed:
            return False  # it heartbeated meanwhile, or another monitor got here first
        result.pods_unknown += Pod.objects.filter(
            node_id=node_id, status__in=[PodStatus.STARTING, PodStatus.RUNNING]
        ).update(status=PodStatus.UNKNOWN, status_reason=NOT_REACHABLE)
    return True


def _mark_lost(node_id: int, now: datetime, cutoff: datetime, result: MonitorResult) -> bool:
    with transaction.atomic():
        claimed = Node.objects.filter(
            pk=node_id, state=NodeState.NOT_READY, last_heartbeat_at__lt=cutoff
        ).update(state=NodeState.LOST)
        if not claimed:
            return False
        result.pods_ended += _end_pods(Pod.objects.filter(node_id=node_id), now)
    return True


def run_monitor_cycle(now: datetime | None = None) -> MonitorResult:
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.NODE_LOST_TIMEOUT)
    result = MonitorResult()

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
                result.pods_ended += _end_pods(stranded.filter(job_id=job_id), now)
        except Exception:
            log.exception("node monitor: ending stopped pods of job %s failed", job_id)
    return result
