"""Template filters over jobs.display (the pure rules live there)."""

from django import template
from django.utils import timezone

from jobs import display
from jobs.models import Job, Pod

register = template.Library()


@register.filter
def job_status(job: Job) -> str:
    """Display label; needs `has_unknown_worker` (annotated by jobs.access.visible_jobs)."""
    return display.display_status(
        job.status,
        stop_requested_at=job.stop_requested_at,
        has_unknown_worker=bool(getattr(job, "has_unknown_worker", False)),
    )


@register.filter
def badge(label: str) -> str:
    return display.badge_class(str(label))


@register.filter
def job_duration(job: Job) -> str:
    return display.format_duration(
        display.duration(job.started_at, job.finished_at, timezone.now())
    )


@register.filter
def pod_duration(pod: Pod) -> str:
    return display.format_duration(
        display.duration(pod.started_at, pod.finished_at, timezone.now())
    )


@register.filter
def gpu_list(indices) -> str:
    return ", ".join(str(i) for i in indices or []) or "—"
