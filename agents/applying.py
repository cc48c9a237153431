"""Applying a heartbeat's items (`agents.heartbeat.actions.record_heartbeat`) and a log
request's streams (`agents.actions.store_logs`): each item alone when it must be, so that
one bad item is refused with a reason and never fails the request (protocol.batches), and
a heartbeat's worker changes in one transaction when they can be."""

import logging
from datetime import datetime

from django.db import transaction

from cluster.models import Node
from jobs.actions.workers import WorkerChange, apply_worker_states
from jobs.models import Pod
from protocol import limits
from protocol.agent import WorkerReport
from protocol.text import fit

log = logging.getLogger("agents.actions")


def apply_reports(
    node: Node, applies: list[tuple[Pod, WorkerReport]], refused: dict[int, str], now: datetime
) -> set[int]:
    """The heartbeat's worker changes (Starting → Running, exits) in one transaction
    (apply_worker_states); should that fail, one by one, so that only the bad item is
    refused. Returns the ids of the pods that changed."""
    if len(applies) > 1:
        changes = [change_of(pod, report) for pod, report in applies]
        try:
            return apply_worker_states(changes, now=now)
        except Exception:
            log.warning("node %s: worker reports applied one by one", node.name, exc_info=True)
    applied: set[int] = set()
    for pod, report in applies:  # each in its own transaction
        one = [change_of(pod, report)]
        outcome = isolated(
            node,
            pod.pk,
            refused,
            "worker report",
            lambda one=one: apply_worker_states(one, now=now),
        )
        if outcome is not FAILED:
            applied |= outcome
    return applied


def change_of(pod: Pod, report: WorkerReport) -> WorkerChange:
    return WorkerChange(
        pod,
        running=report.state == "running",
        exit_code=report.exit_code,
        error=report.error,
        container_id=report.container_id,
        logs_delivered=report.logs_delivered,
        ended_by=report.ended_by or "",
    )


FAILED = object()


def isolated(
    node: Node, pod_id: int, refused: dict[int, str], what: str, apply, *, atomic: bool = False
) -> object:
    """Apply one item alone. An item that cannot be applied is rolled back alone (`apply`
    runs its writes in a transaction: its own, or `atomic=True` for one here) and refused
    with a reason; it never fails the request (one bad row would take the whole node
    NotReady). Its pod stays live, so the reply still lists it and the agent reports it
    again."""
    try:
        if not atomic:
            return apply()
        with transaction.atomic():
            return apply()
    except Exception as exc:
        log.exception("node %s: %s of pod %s failed", node.name, what, pod_id)
        # The details stay in the console's log; the agent learns which item and what kind.
        reason = f"the console could not apply the {what} ({type(exc).__name__})"
        refused.setdefault(pod_id, fit(reason, limits.REASON))
        return FAILED
