"""What the controller writes, each through the action of the app that owns the rows, the
same code paths as the node agent's reports (agents.actions, docs/kubernetes.md):

- inventory: `cluster.actions.sync_cluster_node`,
- worker statuses: `jobs.actions.workers.apply_worker_state` (compare-and-set on the
  pod's live status; the job reconciled, fault tolerance applied, `stop_as` honoured so a
  preempted worker ends Resource Preempted),
- workers the cluster took away: `jobs.actions.workers.end_pods_of_dead_nodes` (Lost: fault
  tolerance as for a lost node, no failure budget spent),
- kubelet refusals: `jobs.actions.workers.requeue_refused_pod`,
- log lines: `jobs.actions.logs.append_log_lines` (each sequence number once),
- checkpoints, progress and accepted units (a new unit is progress for the hang judge):
  `jobs.actions.progress`,
- rank 0's validator outcome: `jobs.actions.results.store_validator`, then its exit.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from cluster.actions import sync_cluster_node
from jobs.actions.logs import append_log_lines
from jobs.actions.progress import may_report, store_checkpoints, store_new_units, store_progress
from jobs.actions.results import fill_image_digest, store_facts, store_validator
from jobs.actions.workers import (
    WorkerChange,
    apply_worker_state,
    apply_worker_states,
    end_pods_of_dead_nodes,
    requeue_refused_pod,
)
from jobs.models import Pod
from jobs.result_reads import resume_identities
from protocol import limits
from protocol.agent import RESUME_REFUSED, ResumeIdentity, RunFacts, ValidatorReport
from protocol.text import fit
from protocol.units import resume_refusal


def sync_node(name: str, fields: dict, gpus: Sequence[dict], alive: bool, now: datetime):
    deadline = now + timedelta(seconds=settings.NODE_NOT_READY_AFTER)
    return sync_cluster_node(name, fields, gpus, alive=alive, now=now, deadline=deadline)


def worker_started(pod: Pod, container_id: str, now: datetime) -> bool:
    return apply_worker_state(pod, running=True, container_id=container_id, now=now)


def worker_exited(pod: Pod, exit_code: int | None, error: str, now: datetime) -> bool:
    return apply_worker_state(
        pod, running=False, exit_code=exit_code, error=error, logs_delivered=True, now=now
    )


def worker_lost(pod: Pod, reason: str, now: datetime) -> int:
    return end_pods_of_dead_nodes(
        Pod.objects.filter(pk=pod.pk), now, reason=fit(reason, limits.REASON)
    )


def worker_refused(pod: Pod, reason: str, now: datetime) -> bool:
    return requeue_refused_pod(pod, reason, now)


def store_lines(pod: Pod, first_seq: int, lines: Sequence[str], now: datetime) -> int:
    """Lines `first_seq`, … of the worker's log (each reading of the log starts at 0): the
    part not stored yet, once. Returns the next sequence number expected."""
    current = pod.log_next_seq
    if first_seq > current:
        return current  # a gap: never store past it (cannot happen with whole readings)
    fresh = [fit(line, limits.LOG_LINE) for line in lines[current - first_seq :]]
    if not fresh:
        return current
    return append_log_lines(pod, current, fresh, now)


def store_extras(
    pod: Pod, checkpoints: list, progress, now: datetime, units=(), result_dir: str = ""
) -> None:
    if checkpoints:
        store_checkpoints(pod, checkpoints, now)
    if progress is not None:
        store_progress(pod, progress, now)
    if units:  # counted results (docs/results.md), promoted on the shared volume
        store_facts(pod, RunFacts(result_dir=result_dir))
        store_new_units(pod, units, now)


def store_run_facts(pod: Pod, facts: RunFacts) -> None:
    """What the controller resolved before the worker's Pod (docs/results.md, "Run
    identity"): the data folders' fingerprint and the result folder."""
    store_facts(pod, facts)


def note_image(pod: Pod, image_id: str) -> bool:
    """The image's id the kubelet reports once the worker runs (False: one was recorded)."""
    return fill_image_digest(pod, image_id)


def worker_resume_refused(pod: Pod, reason: str, now: datetime) -> bool:
    """The worker never started: the run it would resume changed (docs/results.md,
    "Resume without duplicates"); fault tolerance never retries it."""
    change = WorkerChange(pod, False, None, fit(reason, limits.REASON), "", True, RESUME_REFUSED)
    return pod.pk in apply_worker_states([change], now=now)


def resume_refusal_of(pod: Pod, facts: RunFacts) -> str:
    """Why this worker may not resume the run whose units it carries ("" : it may)."""
    return resume_refusal(resume_identities([pod]).get(pod.pk), facts)


def identities_of(pods: Sequence[Pod]) -> dict[int, ResumeIdentity]:
    """Pod id → the run its Starting worker carries accepted units of (the image check once
    its Pod runs: kube.decisions.image_refusal)."""
    return resume_identities(pods)


def worker_start_refused(pod: Pod, reason: str, now: datetime) -> bool:
    """The worker never started, and no node would start it: the checkpoint volume every
    node shares lacks the free space its output needs (docs/results.md, "Before a long
    run"). Recorded as a refusal on every node (`resume_refused`): the job fails with the
    reason, its restart budget untouched, never retried (a retry would meet the same
    volume)."""
    return worker_resume_refused(pod, f"launch failed: refused to start: {reason}", now)


def worker_validated(pod: Pod, error: str, report: ValidatorReport, now: datetime) -> bool:
    """Rank 0 exited 0 and its validator ended: the outcome is stored and then the exit is
    judged with it, as an agent's report is (jobs.actions.progress.store_worker_extras,
    then the exit); one transaction, so a crash between leaves neither."""
    with transaction.atomic():
        if may_report(pod):
            store_validator(pod, report, now)
        return worker_exited(pod, 0, error, now)
