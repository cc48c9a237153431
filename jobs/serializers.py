"""JSON shapes of jobs, workers and log lines for /api/v1/ (no queries of their own).

Callers pass jobs from `jobs.access.visible_jobs` (workspace, quota and owner already joined,
`has_unknown_worker` annotated) and pods with node and charged quota joined.
"""

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from jobs.display import display_status
from jobs.logview import LogLine
from jobs.models import Job, Pod


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def pod_json(pod: Pod) -> dict[str, Any]:
    return {
        "rank": pod.rank,
        "attempt": pod.attempt,
        "node": pod.node.name if pod.node_id else None,
        "gpu_indices": list(pod.gpu_indices or []),
        "charged_quota": pod.charged_quota.name,
        "in_quota": pod.in_quota,
        "status": pod.status,
        "exit_code": pod.exit_code,
    }


def job_json(job: Job, pods: Iterable[Pod] | None = None) -> dict[str, Any]:
    unknown = getattr(job, "has_unknown_worker", None)
    if unknown is None and pods is not None:
        pods = list(pods)
        unknown = any(p.status == "Unknown" and p.attempt == job.attempt for p in pods)
    body: dict[str, Any] = {
        "id": job.pk,
        "name": job.name,
        "workspace": {"id": job.workspace_id, "name": job.workspace.name},
        "quota": {"id": job.quota_id, "name": job.quota.name},
        "owner": job.owner.get_username(),
        "image": job.image,
        "command": job.command,
        "env": dict(job.env or {}),
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "cpus_per_worker": job.cpus_per_worker,
        "memory_gb_per_worker": job.memory_gb_per_worker,
        "priority": job.priority,
        "idle_resources": job.idle_resources,
        "max_runtime_seconds": job.max_runtime_seconds,
        "status": job.status,
        "display_status": display_status(
            job.status,
            stop_requested_at=job.stop_requested_at,
            has_unknown_worker=bool(unknown),
        ),
        "status_reason": job.status_reason,
        "stop_requested_at": _time(job.stop_requested_at),
        "queue_position": job.queue_position,
        "attempt": job.attempt,
        "restart_count": job.restart_count,
        "exit_code": job.exit_code,
        "created_at": _time(job.created_at),
        "started_at": _time(job.started_at),
        "finished_at": _time(job.finished_at),
        "cloned_from": job.cloned_from_id,
    }
    if pods is not None:
        body["pods"] = [pod_json(p) for p in pods]
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
