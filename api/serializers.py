"""JSON shapes of jobs, workers and log lines for /api/v1/ (no queries of their own).

Callers pass jobs from `jobs.access.visible_jobs` (workspace, quota and owner already joined,
`has_unknown_worker` annotated) and pods with node and charged quota joined.
"""

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from jobs.forecast import Estimate, cached_expected_starts
from jobs.logview import LogLine
from jobs.models import Job, Pod
from jobs.result_reads import has_run, progress_line, result_state
from policy import jobspec
from policy.display import display_reason, display_status
from policy.rendezvous import job_roles, rendezvous_of
from policy.scheduler.model import Snapshot
from policy.secrets import redacted_fields
from policy.statuses import WAITING_JOB_STATUSES


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def pod_json(pod: Pod) -> dict[str, Any]:
    return {
        "rank": pod.rank,
        "attempt": pod.attempt,
        "node": pod.node.name if pod.node_id else None,
        "gpu_indices": list(pod.gpu_indices or []),
        "gpu_uuids": list(pod.gpu_uuids or []),
        "charged_quota": pod.charged_quota.name,
        "in_quota": pod.in_quota,
        "status": pod.status,
        "status_reason": pod.status_reason,
        "exit_code": pod.exit_code,
        "progress": progress_json(pod),
        # The last report or log lines of this worker the console refused or repaired.
        "report_refused": pod.report_refused,
        "report_refused_at": _time(pod.report_refused_at),
    }


def progress_json(pod: Pod) -> dict[str, Any] | None:
    if pod.progress_step is None:
        return None
    return {
        "step": pod.progress_step,
        "total": pod.progress_total,
        "phase": pod.progress_phase,
        "metrics": dict(pod.progress_metrics or {}),
        "at": _time(pod.progress_at),
    }


def restart_json(record) -> dict[str, Any]:
    return {
        "from_attempt": record.from_attempt,
        "to_attempt": record.to_attempt,
        "at": _time(record.created_at),
        "kind": record.kind,
        "whole_job": record.whole_job,
        "worker_rank": record.worker_rank,
        "node": record.node_name or None,
        "exit_code": record.exit_code,
        "error_excerpt": record.error_excerpt,
        "rule": record.rule,
        "reason": record.reason,
        "restarts_used": record.restarts_used,
        "restarts_max": record.restarts_max,
        "backoff_seconds": record.backoff_seconds,
        "running_at": _time(record.running_at),
        "restart_seconds": record.restart_seconds,
    }


def checkpoint_json(checkpoint) -> dict[str, Any]:
    return {
        "attempt": checkpoint.attempt,
        "step": checkpoint.step,
        "path": checkpoint.path,
        "size_bytes": checkpoint.size_bytes,
        "checksum": checkpoint.checksum,
        "committed": checkpoint.committed,
        "created_at": _time(checkpoint.created_at),
        "pruned_at": _time(checkpoint.pruned_at),
    }


def event_json(event) -> dict[str, Any]:
    return {
        "id": event.pk,
        "at": _time(event.created_at),
        "attempt": event.attempt,
        "from_status": event.from_status or None,
        "to_status": event.to_status or None,
        "reason": event.reason,
        "actor": event.actor,
        "user": event.user.get_username() if event.user_id else None,
    }


def shown_shape(job: Job) -> dict[str, Any]:
    """The job's shape as the API shows it: env values marked secret never appear
    (policy.secrets); the workers get them from the agent's spec, not from here."""
    return redacted_fields(jobspec.to_json(job))


def job_json(job: Job, pods: Iterable[Pod] | None = None) -> dict[str, Any]:
    unknown = getattr(job, "has_unknown_worker", None)
    if pods is not None:
        # The pods shown decide when they are: read after the job row (and its annotation),
        # a worker that went Unknown in between is then Unknown in the status too, not only
        # in the list of workers.
        pods = list(pods)
        unknown = any(p.status == "Unknown" and p.attempt == job.attempt for p in pods)
    body: dict[str, Any] = {
        "id": job.pk,
        "workspace": {"id": job.workspace_id, "name": job.workspace.name},
        "quota": {"id": job.quota_id, "name": job.quota.name},
        "owner": job.owner.get_username(),
        # The job's own fields, as its shape shows them (policy.jobspec); secrets redacted.
        **shown_shape(job),
        "status": job.status,
        "display_status": display_status(
            job.status,
            stop_requested_at=job.stop_requested_at,
            has_unknown_worker=bool(unknown),
        ),
        "status_reason": job.status_reason,
        # What the job page shows with the status: a stop under way says so, rather than the
        # stored reason of how the job got where it is ("all workers running").
        "display_reason": display_reason(
            job.status,
            job.status_reason,
            stop_requested_at=job.stop_requested_at,
            stop_reason=job.stop_reason,
        ),
        "stop_requested_at": _time(job.stop_requested_at),
        "queue_position": job.queue_position,
        "attempt": job.attempt,
        "restart_count": job.restart_count,
        "exit_code": job.exit_code,
        "created_at": _time(job.created_at),
        "started_at": _time(job.started_at),
        "finished_at": _time(job.finished_at),
        "cloned_from": job.cloned_from_id,
        "preemption_count": job.preemption_count,
        "node_loss_count": job.node_loss_count,
        "restart_not_before": _time(job.restart_not_before),
        "hang_deadline": _time(job.hang_deadline),
        "resume_from": job.resume_from,
        # Nodes excluded after a retry-elsewhere failure (names stored with the ids).
        "excluded_nodes": [entry.get("name", "") for entry in job.excluded_nodes or []],
        # Counted results (docs/results.md): the run, its accepted work, the verdict.
        "run_id": job.run.run_id if has_run(job) else None,
        "result_state": result_state(job),
        "result_progress": progress_line(job),
    }
    # How the workers meet (docs/distributed.md): each rank's role and the rendezvous.
    roles = job_roles(job)
    body["roles"] = {role: roles.count(role) for role in dict.fromkeys(roles)}
    body["rendezvous"] = rendezvous_of(job)
    if pods is not None:
        body["pods"] = [
            {**pod_json(p), "role": roles[p.rank] if p.rank < len(roles) else ""} for p in pods
        ]
    if hasattr(job, "restart_list"):
        body["restarts"] = [restart_json(r) for r in job.restart_list]
    if hasattr(job, "event_list"):
        body["events"] = [event_json(e) for e in job.event_list]
    if hasattr(job, "checkpoint_list"):
        body["checkpoints"] = [checkpoint_json(c) for c in job.checkpoint_list]
    return body


def node_json(node) -> dict[str, Any]:
    """A node as researchers see it; `used` is annotated by the caller."""
    return {
        "name": node.name,
        "state": node.state,
        "cordoned": node.cordoned,
        "resource_type": node.resource_type,
        "gpu_type": node.gpu_type,
        "gpus": node.gpus,
        "used_gpus": node.used,
        "cpus": node.cpus,
        "memory_gb": node.memory_gb,
        "last_heartbeat_at": _time(node.last_heartbeat_at),
    }


def log_line_json(line: LogLine) -> dict[str, Any]:
    return {"seq": line.seq, "rank": line.rank, "attempt": line.attempt, "text": line.text}


# -- expected starts (jobs.forecast's estimates, as the API shows them) -------------------


def estimate_json(estimate: Estimate | None) -> dict | None:
    """The API's shape: always labelled an estimate, with what it rests on."""
    if estimate is None:
        return None
    return {
        "estimate": True,
        "at": estimate.at.isoformat() if estimate.at else None,
        "basis": estimate.basis,
    }


NOT_ESTIMATED = {"estimate": True, "at": None, "basis": "not estimated"}


def expected_start_json(jobs, snapshot: Snapshot | None = None) -> dict[int, dict | None]:
    """The API's `expected_start` of each job: the estimate of a waiting one (labelled an
    estimate, with what it rests on), None for one that is not waiting."""
    waiting = {j.pk for j in jobs if j.status in WAITING_JOB_STATUSES}
    estimates = cached_expected_starts(waiting, snapshot)
    return {
        j.pk: (estimate_json(estimates.get(j.pk)) or NOT_ESTIMATED) if j.pk in waiting else None
        for j in jobs
    }
