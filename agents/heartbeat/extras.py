"""What a heartbeat's workers report beside their state: progress, checkpoints, accepted
units, run facts (docs/agent-protocol.md, "A heartbeat's progress together"). Stored before
any report is applied (`agents.heartbeat.actions.record_heartbeat`)."""

import logging
from datetime import datetime

from django.db import transaction

from agents.applying import isolated
from cluster.models import Node
from jobs.actions.progress import store_progress_many, store_worker_extras
from jobs.models import Pod
from protocol.agent import WorkerReport

log = logging.getLogger("agents.actions")


def store_extras(
    node: Node,
    reports: list[WorkerReport],
    pods: dict[int, Pod],
    refused: dict[int, str],
    now: datetime,
) -> None:
    """Progress and checkpoints, before any report is applied: a checkpoint saved on
    SIGTERM must be known before the exit reported in this same heartbeat restarts the job
    from it. Reports of progress alone are stored together (`store_progress_many`, in a
    savepoint); should that fail they are stored like the others, each worker's alone."""
    alone = [r for r in reports if _more_than_progress(r)]
    together = [r for r in reports if r.progress is not None and not _more_than_progress(r)]
    if together and not _progress_together(node, together, pods, now):
        alone += together
    for report in alone:
        if report.progress is not None or report.checkpoints or report.units or report.facts:
            isolated(
                node,
                report.pod_id,
                refused,
                "progress and checkpoints",
                lambda report=report: store_worker_extras(pods, [report], now),
                atomic=True,
            )


def _more_than_progress(report: WorkerReport) -> bool:
    """A report that carries more than progress: stored alone, in its own savepoint."""
    return bool(report.checkpoints or report.units or report.facts or report.validator)


def _progress_together(
    node: Node, reports: list[WorkerReport], pods: dict[int, Pod], now: datetime
) -> bool:
    """The progress of these reports in one savepoint; False (nothing kept) on an error."""
    reported = [
        (pod, r.progress)
        for r in reports
        if (pod := pods.get(r.pod_id)) is not None and pod.attempt == r.attempt
    ]
    try:
        with transaction.atomic():
            store_progress_many(reported, now)
    except Exception:
        log.exception("node %s: progress of %d pods together failed", node.name, len(reported))
        return False
    return True
