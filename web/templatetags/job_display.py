"""Template filters over policy.display (the pure rules live there)."""

from django import template
from django.utils import timezone

from jobs.models import Job, Pod
from policy import display

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
def job_reason(job: Job) -> str:
    return display.display_reason(
        job.status,
        job.status_reason,
        stop_requested_at=job.stop_requested_at,
        stop_reason=job.stop_reason,
    )


@register.filter
def badge(label: str) -> str:
    return display.badge_class(str(label))


@register.filter
def job_duration(job: Job) -> str:
    """How long the job ran (`running_for`, set by the view from its workers' spans:
    `policy.display.running_time`), not the time since it first started."""
    return display.format_duration(job.running_for)


@register.filter
def pod_duration(pod: Pod) -> str:
    return display.format_duration(
        display.duration(pod.started_at, pod.finished_at, timezone.now())
    )


@register.filter
def gpu_list(indices) -> str:
    return ", ".join(str(i) for i in indices or []) or "—"


@register.filter
def since(moment, now=None) -> str:
    """How long ago `moment` was: "3m 05s"."""
    if moment is None:
        return "—"
    return display.format_duration((now or timezone.now()) - moment)


# Usage bar segments: (css class, legend, GPUs). Widths are SVG attributes, not inline
# styles, so the strict Content-Security-Policy (no 'unsafe-inline') holds.
@register.filter
def usage_segments(usage) -> list[dict]:
    parts = [
        ("seg-in-quota", "in quota", usage.in_quota),
        ("seg-idle-own", "own idle jobs", usage.idle_own),
        ("seg-lent", "lent to other quotas", usage.lent),
        ("seg-free", "free", usage.free),
        ("seg-borrowed", "borrowed from other quotas", usage.borrowed),
    ]
    scale = max(usage.own, usage.used + usage.borrowed, 1)  # the own guarantee's bar
    x = 0.0
    out = []
    for css, legend, gpus in parts:
        width = 100.0 * gpus / scale
        out.append(
            {"css": css, "legend": legend, "gpus": gpus, "x": f"{x:.3f}", "w": f"{width:.3f}"}
        )
        x += width
    return out


@register.filter
def share(part: int, whole: int) -> str:
    """A width in percent for an SVG bar (0 to 100, as text)."""
    return f"{100.0 * part / whole:.3f}" if whole else "0"


@register.filter
def restart_budget(job: Job) -> str:
    """Failure restarts used / allowed, for jobs with Automatic Fault Tolerance."""
    if not job.fault_tolerance:
        return "—"
    from policy.faulttolerance.policy import config_of

    return f"{job.restart_count}/{config_of(job).max_restarts}"


@register.filter
def result_progress(job: Job) -> str:
    """ "phase write · 5 of 8 partitions accepted · 2,500 of 4,000 items" (docs/results.md)."""
    from jobs.result_reads import progress_line

    return progress_line(job)


@register.filter
def until(moment, now=None) -> str:
    """How far ahead `moment` is: "in 3m 05s", or "now" once it has passed."""
    if moment is None:
        return "—"
    ahead = moment - (now or timezone.now())
    return "now" if ahead.total_seconds() <= 0 else "in " + display.format_duration(ahead)
