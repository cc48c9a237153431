"""Expected start of waiting jobs, the shell (docs/scheduling.md "Expected start"): reads
the scheduler's snapshot, what each live job holds and past durations, then runs the pure
`policy.forecast.forecast()` what-if."""

import hashlib
from collections import defaultdict
from datetime import datetime, timedelta

from policy.durations import median_durations, run_length, running_end
from policy.forecast import Estimate, Held, forecast
from policy.scheduler.model import Snapshot

HISTORY_ROWS = 2000  # recent finished jobs read for durations
CACHE_KEY = "jobs.forecast.expected_starts"


def current_snapshot() -> Snapshot:
    """The scheduler's snapshot, read with the scheduler's own loader (no lock, no writes)."""
    from jobs.scheduler.cycle import load_snapshot

    snapshot, _ = load_snapshot()
    return snapshot


def _past_runs(keys: set[tuple[int, str]]):
    from jobs.models import Job
    from policy.statuses import JobStatus

    done = Job.objects.filter(
        status=JobStatus.COMPLETED, started_at__isnull=False, finished_at__isnull=False
    )
    names = {name for _, name in keys}
    if not names:
        return []
    if len(names) <= 500:
        done = done.filter(name__in=sorted(names))
    rows = done.order_by("-finished_at").values_list(
        "quota_id", "name", "started_at", "finished_at"
    )[:HISTORY_ROWS]
    return [row for row in rows if (row[0], row[1]) in keys]


def _live_pods() -> dict[int, list]:
    """Every live worker, named rows grouped by job (one query)."""
    from jobs.models import Pod
    from policy.statuses import ACTIVE_POD_STATUSES

    pods = Pod.objects.filter(status__in=[s.value for s in ACTIVE_POD_STATUSES]).values_list(
        "job_id",
        "node_id",
        "gpu_indices",
        "cpus",
        "memory_gb",
        "charged_quota_id",
        "in_quota",
        "rank",
        "progress_step",
        "progress_total",
        "progress_rate",
        "job__name",
        "job__quota_id",
        "job__status",
        "job__started_at",
        "job__max_runtime_seconds",
        "job__stop_requested_at",
        named=True,
    )
    by_job: dict[int, list] = defaultdict(list)
    for pod in pods:
        by_job[pod.job_id].append(pod)
    return by_job


def _held(by_job: dict[int, list], now: datetime, past: dict, grace: timedelta) -> list[Held]:
    """What each live job holds, and when it is expected to end."""
    from policy.statuses import PLACED_JOB_STATUSES

    held = []
    placed = {s.value for s in PLACED_JOB_STATUSES}
    for job_id, pods in by_job.items():
        first = min(pods, key=lambda pod: pod.rank)  # rank 0 speaks for the job's progress
        if first.job__status not in placed or first.job__stop_requested_at is not None:
            ends, basis = now + grace, "stopping"
        else:
            ends, basis = running_end(
                now=now,
                started_at=first.job__started_at,
                max_runtime=first.job__max_runtime_seconds,
                progress=(first.progress_step, first.progress_total, first.progress_rate),
                past=past.get((first.job__quota_id, first.job__name)),
            )
        charges = {pod.charged_quota_id for pod in pods}
        held.append(
            Held(
                job_id=job_id,
                label=f"job #{job_id}",
                charged_quota_id=first.charged_quota_id,
                in_quota=first.in_quota,
                pods=tuple(
                    (pod.node_id, tuple(pod.gpu_indices or ()), pod.cpus, pod.memory_gb)
                    for pod in pods
                ),
                ends_at=ends,
                basis=basis,
                charges=tuple(pod.charged_quota_id for pod in pods) if len(charges) > 1 else (),
            )
        )
    return held


def expected_starts(
    snapshot: Snapshot | None = None,
    now: datetime | None = None,
    targets: set[int] | None = None,
) -> dict[int, Estimate]:
    """Estimates keyed by job id, for every waiting job or at least the `targets` (three
    reads besides the snapshot's)."""
    from django.conf import settings
    from django.utils import timezone

    from jobs.models import Job
    from jobs.scheduler.cycle import plan_options
    from policy.statuses import WAITING_JOB_STATUSES

    now = now or timezone.now()
    snapshot = snapshot or current_snapshot()
    if not snapshot.jobs:
        return {}
    by_job = _live_pods()
    waiting_runtime = dict(
        Job.objects.filter(status__in=list(WAITING_JOB_STATUSES)).values_list(
            "id", "max_runtime_seconds"
        )
    )
    live_keys = {(pods[0].job__quota_id, pods[0].job__name) for pods in by_job.values()}
    keys = live_keys | {(j.quota_id, j.name) for j in snapshot.jobs}
    past = median_durations(_past_runs(keys))
    grace = timedelta(seconds=getattr(settings, "DEFAULT_STOP_GRACE", 30))
    held = _held(by_job, now, past, grace)
    durations = {}
    for job in snapshot.jobs:
        length = run_length(waiting_runtime.get(job.id), past.get((job.quota_id, job.name)))
        if length is not None:
            durations[job.id] = length
    return forecast(snapshot, held, durations, now, plan_options(), targets=targets)


def cached_expected_starts(
    targets: set[int], snapshot: Snapshot | None = None
) -> dict[int, Estimate]:
    """Estimates for `targets` (the waiting jobs a page shows), reused for
    FORECAST_CACHE_SECONDS: a page that polls every few seconds, or many users looking at
    the same jobs, share one what-if run. A caller that has just loaded the snapshot passes
    it (no second load)."""
    from django.conf import settings
    from django.core.cache import cache

    if not targets:
        return {}
    seconds = getattr(settings, "FORECAST_CACHE_SECONDS", 0)
    if not seconds:
        return expected_starts(snapshot, targets=targets)
    key = f"{CACHE_KEY}:{','.join(map(str, sorted(targets)))}"
    if len(key) > 200:
        key = f"{CACHE_KEY}:{hashlib.sha256(key.encode()).hexdigest()}"
    value = cache.get(key)
    if value is None:
        value = expected_starts(snapshot, targets=targets)
        cache.set(key, value, seconds)
    return value
