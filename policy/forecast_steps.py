"""The steps of the expected-start what-if (jobs.forecast): when the plan can next change.

Pure. Besides live jobs ending, a borrower becoming reclaimable is such a moment: plan()
reclaims it only once it has run min_runtime_before_reclaim (and within the per-hour cap),
so the what-if must plan again then, not only when jobs end (docs/scheduling.md).
"""

from datetime import datetime, timedelta

from policy.scheduler.model import RunningSnap
from policy.scheduler.plan import PlanOptions

BUCKET_MIN = timedelta(minutes=1)
BUCKET_SHARE = 0.25


def reclaim_allowed_at(r: RunningSnap, now: datetime, options: PlanOptions) -> datetime | None:
    """When plan() may first reclaim this borrower, if later than `now` (docs/scheduling.md:
    it runs at least min_runtime_before_reclaim, and is preempted at most
    max_preemptions_per_hour times an hour). None: nothing to wait for."""
    if r.in_quota or r.stopping or r.started_at is None:
        return None
    allowed = r.started_at + timedelta(seconds=options.min_runtime_before_reclaim_s)
    recent = sorted(at for at in r.preempted_at if now - at < timedelta(hours=1))
    cap = options.max_preemptions_per_hour
    if cap and len(recent) >= cap:  # allowed again once the oldest of those is an hour old
        allowed = max(allowed, recent[-cap] + timedelta(hours=1))
    return allowed if allowed > now else None


def next_step(
    held: dict, running: dict[int, RunningSnap], t: datetime, now: datetime, options: PlanOptions
) -> tuple[datetime, str, list] | None:
    """The next moment the plan can change: live jobs end, or a borrower becomes reclaimable
    (the what-if must try a reclaim when it becomes allowed, not only when jobs end). Ends
    and reclaims close together are one step, taken at its latest time. Returns (time, why,
    the jobs that end by then), or None when nothing is left to happen."""
    ending = [h for h in held.values() if h.ends_at is not None]
    reclaims = {}
    for r in running.values():
        at = reclaim_allowed_at(r, t, options)
        h = held.get(r.id)
        if at is not None and (h is None or h.ends_at is None or at < h.ends_at):
            reclaims[r.id] = at
    times = [h.ends_at for h in ending] + list(reclaims.values())
    if not times:
        return None
    first = max(min(times), t)
    window = max(BUCKET_MIN, (first - now) * BUCKET_SHARE)
    step = sorted(
        (h for h in ending if h.ends_at <= first + window), key=lambda h: (h.ends_at, h.job_id)
    )
    due = sorted((at, job_id) for job_id, at in reclaims.items() if at <= first + window)
    at = max([t, *(h.ends_at for h in step), *(when for when, _ in due)])
    if step:
        last = step[-1]
        why = f"when {last.label} ends ({last.basis})"
        if len(step) > 1:
            why = f"when {len(step)} running jobs have ended, the last {last.label} ({last.basis})"
    else:
        why = f"when job #{due[-1][1]} may be reclaimed (its minimum runtime before reclaim)"
    return at, why, step
