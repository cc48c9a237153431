"""Usage history's roll-up (docs/usage-history.md): pods' intervals rolled up into hourly
and daily buckets.

The roll-up is level-triggered and idempotent: each run recomputes whole hours from the
source rows (pods, their charge moves, job events, GPU samples) and replaces them, from the
first hour not yet final up to now. It holds the one `UsageRollup` row's lock, so two copies
run one after the other and the second rewrites the same numbers.
"""

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q, Sum
from django.db.models.functions import TruncDay, TruncMonth
from django.utils import timezone

from jobs.models import ChargeMove, Job, JobEvent, Pod, WorkerGpuSample
from policy.statuses import ACTIVE_JOB_STATUSES, ACTIVE_POD_STATUSES, WAITING_JOB_STATUSES
from policy.usage_history import (
    FIELDS,
    HOUR,
    Cells,
    JobCells,
    PodSpan,
    Span,
    bucket_cells,
    ceil_hour,
    floor_hour,
    idle_spans,
    job_cells,
    waiting_spans,
)
from protocol.limits import IDLE_UTILIZATION
from quotas.models import Quota
from usage.actions.decay import write_decayed_usage
from usage.models import JobUsageBucket, UsageBucket, UsageRollup, UsageTotal
from usage.query import month_floor, next_month

_BATCH = 900  # ids per IN (…) (SQLite's parameter limit)
# A commit can land a little after the time it wrote: an hour is final this long after it.
GRACE = timedelta(minutes=2)
# Two idle GPU samples further apart than this are no evidence for the time between.
IDLE_GAP = timedelta(minutes=5)
_LIVE = sorted(s.value for s in ACTIVE_POD_STATUSES)
_WAITING = frozenset(s.value for s in WAITING_JOB_STATUSES)
COLUMNS = tuple(f"{name}_us" for name in FIELDS)


@dataclass(frozen=True, slots=True)
class RollupResult:
    since: datetime | None = None
    until: datetime | None = None
    buckets: int = 0
    rolled_until: datetime | None = None
    paced: bool = False  # skipped: the last run was too recent for its cost

    def as_dict(self) -> dict:
        return {k: str(v) if isinstance(v, datetime) else v for k, v in self._items()}

    def _items(self):
        names = ("since", "until", "buckets", "rolled_until", "paced")
        return ((n, getattr(self, n)) for n in names)


def roll_up_usage(now: datetime | None = None, *, paced: bool = False) -> RollupResult:
    """Rewrite the hours from the first one not final up to now (at most
    USAGE_ROLLUP_MAX_HOURS per run), their days, and the final totals. `paced` (the
    periodic runs): skip while the last run took more than USAGE_ROLLUP_MAX_SHARE of the
    time since it ran (`roll_up_due`)."""
    now = now or timezone.now()
    started = time.monotonic()
    _ensure_state_row()
    with transaction.atomic():
        state = UsageRollup.objects.select_for_update().get(pk=1)
        if paced and not roll_up_due(state.ran_at, state.last_seconds, now):
            return RollupResult(rolled_until=state.rolled_until, paced=True)
        lo = state.rolled_until or _first_hour(now)
        hi = min(ceil_hour(now), lo + HOUR * settings.USAGE_ROLLUP_MAX_HOURS)
        if lo >= hi:
            return RollupResult(rolled_until=state.rolled_until)
        cells, jobs, meta = compute_cells(lo, hi, now)
        gpu_types = dict(Quota.objects.values_list("pk", "gpu_type"))
        written = _write_hours(cells, lo, hi, gpu_types)
        write_job_hours(jobs, meta, gpu_types, lo, hi)
        days = _write_days(lo, hi)
        _write_months(*days)
        final = max(lo, min(hi, floor_hour(now - GRACE)))
        _add_totals(lo, final)
        UsageRollup.objects.filter(pk=1).update(
            rolled_until=final, ran_at=now, last_seconds=time.monotonic() - started
        )
        _forget(now - timedelta(days=settings.USAGE_RETENTION_DAYS))
        write_decayed_usage(now)
    return RollupResult(since=lo, until=hi, buckets=written, rolled_until=final)


def roll_up_due(ran_at: datetime | None, last_seconds: float, now: datetime) -> bool:
    """Whether a periodic roll-up runs now: the last one's cost is at most
    USAGE_ROLLUP_MAX_SHARE of the time since it ran (docs/usage-history.md)."""
    if ran_at is None:
        return True
    return last_seconds <= settings.USAGE_ROLLUP_MAX_SHARE * (now - ran_at).total_seconds()


def _ensure_state_row() -> None:
    if not UsageRollup.objects.filter(pk=1).exists():
        try:
            with transaction.atomic():
                UsageRollup.objects.create(pk=1)
        except IntegrityError:
            pass  # another copy created it first


def _first_hour(now: datetime) -> datetime:
    first = Job.objects.order_by("created_at").values_list("created_at", flat=True).first()
    return floor_hour(first or now)


def compute_cells(lo: datetime, hi: datetime, now: datetime) -> tuple[Cells, JobCells, dict]:
    """The cells of the hours in [lo, hi) from the source rows, as of `now`: per quota and
    (quota, workspace, user), per job, and each job's (quota, workspace, user)."""
    pods = _pod_spans(lo, hi, now)
    waits, idles = _waits(lo, hi, now), _idles(pods, lo, hi)
    meta = {s.job_id: (s.job_quota_id, s.workspace_id, s.user_id) for s in pods.values()}
    meta |= {s.job_id: (s.job_quota_id, s.workspace_id, s.user_id) for s in waits}
    return (
        bucket_cells(pods.values(), waits, idles, lo, hi),
        job_cells(pods.values(), waits, idles, lo, hi),
        meta,
    )


def _forget(cutoff: datetime) -> None:
    """Retention: hours and days before the cutoff, and months wholly before it."""
    UsageBucket.objects.filter(start__lt=cutoff).exclude(span="m").delete()
    UsageBucket.objects.filter(span="m", start__lt=month_floor(cutoff)).delete()
    JobUsageBucket.objects.filter(start__lt=cutoff).delete()


def _chunks(ids: list[int]) -> Iterable[list[int]]:
    for i in range(0, len(ids), _BATCH):
        yield ids[i : i + _BATCH]


_POD_FIELDS = (
    "pk",
    "job_id",
    "job__quota_id",
    "job__workspace_id",
    "job__owner_id",
    "gpus",
    "created_at",
    "finished_at",
    "status",
    "charged_quota_id",
)


def _pod_spans(lo: datetime, hi: datetime, now: datetime) -> dict[int, PodSpan]:
    """Pods live in [lo, hi): live now (partial index pod_active_by_quota) or ended after
    `lo` (pod_finished_at), split at their charge moves."""
    live = Pod.objects.filter(status__in=_LIVE, created_at__lt=hi)
    ended = Pod.objects.filter(finished_at__gt=lo, created_at__lt=hi)
    rows = {r[0]: r for qs in (live, ended) for r in qs.values_list(*_POD_FIELDS)}
    moves: dict[int, list[tuple[datetime, int]]] = defaultdict(list)
    for chunk in _chunks(sorted(rows)):
        found = ChargeMove.objects.filter(pod_id__in=chunk).order_by("pod_id", "at", "pk")
        for pod_id, at, from_quota in found.values_list("pod_id", "at", "from_quota_id"):
            moves[pod_id].append((at, from_quota))
    spans = {}
    for pk, job, quota, workspace, owner, gpus, start, finished, status, charged in rows.values():
        end = finished or (now if status in _LIVE else start)
        pod_moves = moves.get(pk, [])
        # Before each move: its `from`; after the last one, the charge the pod has now.
        charges = [(start, pod_moves[0][1] if pod_moves else charged)]
        for i, (at, _) in enumerate(pod_moves):
            after = pod_moves[i + 1][1] if i + 1 < len(pod_moves) else charged
            charges.append((at, after))
        spans[pk] = PodSpan(quota, workspace, owner, gpus, start, end, tuple(charges), job)
    return spans


def _waits(lo: datetime, hi: datetime, now: datetime) -> list[Span]:
    """Waiting jobs' asked-for GPUs: every job active now or ended after `lo`, its waits read
    from its status changes (jobevent_job_time)."""
    active = Q(status__in=sorted(s.value for s in ACTIVE_JOB_STATUSES)) | Q(finished_at__gte=lo)
    jobs = {
        pk: (quota, workspace, owner, workers * per_worker)
        for pk, quota, workspace, owner, workers, per_worker in Job.objects.filter(
            active, created_at__lt=hi
        ).values_list("pk", "quota_id", "workspace_id", "owner_id", "workers", "gpus_per_worker")
    }
    events: dict[int, list[tuple[datetime, str]]] = defaultdict(list)
    for chunk in _chunks(sorted(jobs)):
        found = JobEvent.objects.filter(job_id__in=chunk, created_at__lt=hi).exclude(to_status="")
        for job_id, at, to_status in found.order_by("job_id", "created_at", "pk").values_list(
            "job_id", "created_at", "to_status"
        ):
            events[job_id].append((at, to_status))
    return [
        Span(quota, workspace, owner, gpus, since, until, job_id)
        for job_id, (quota, workspace, owner, gpus) in jobs.items()
        for since, until in waiting_spans(events.get(job_id, []), _WAITING, now)
    ]


def _idles(pods: dict[int, PodSpan], lo: datetime, hi: datetime) -> list[Span]:
    """GPUs held but idle: between two idle NVML samples of a pod (gpu_sample_pod_at)."""
    samples: dict[int, list[tuple[datetime, int | None]]] = defaultdict(list)
    for chunk in _chunks(sorted(pods)):
        found = WorkerGpuSample.objects.filter(
            pod_id__in=chunk, at__gte=lo - IDLE_GAP, at__lt=hi + IDLE_GAP
        ).order_by("pod_id", "at", "pk")
        for pod_id, at, utilization in found.values_list("pod_id", "at", "utilization"):
            samples[pod_id].append((at, utilization))
    spans = []
    for pod_id, series in samples.items():
        pod = pods[pod_id]
        for since, until in idle_spans(series, IDLE_UTILIZATION, IDLE_GAP):
            since, until = max(since, pod.start), min(until, pod.end)
            if since < until:
                spans.append(
                    Span(
                        pod.job_quota_id,
                        pod.workspace_id,
                        pod.user_id,
                        pod.gpus,
                        since,
                        until,
                        pod.job_id,
                    )
                )
    return spans


def _write_hours(cells: Cells, lo: datetime, hi: datetime, gpu_types: dict) -> int:
    UsageBucket.objects.filter(span="h", start__gte=lo, start__lt=hi).delete()
    UsageBucket.objects.bulk_create(
        (
            UsageBucket(
                span="h",
                start=hour,
                quota_id=quota,
                workspace_id=workspace,
                user_id=user,
                gpu_type=gpu_types.get(quota, ""),
                **dict(zip(COLUMNS, values, strict=True)),
            )
            for (hour, quota, workspace, user), values in cells.items()
            if any(values)
        ),
        batch_size=500,
    )
    return len(cells)


def _write_days(lo: datetime, hi: datetime) -> None:
    """Each UTC day touched by [lo, hi) again as the sum of its hours."""
    day_lo = lo.astimezone(UTC).replace(hour=0)
    day_hi = ceil_hour(hi).astimezone(UTC).replace(hour=0)
    if day_hi < hi:
        day_hi += timedelta(days=1)
    for model in (UsageBucket, JobUsageBucket):
        _sum_into(model, "h", "d", TruncDay, day_lo, day_hi)
    return day_lo, day_hi


def _write_months(day_lo: datetime, day_hi: datetime) -> None:
    """Each UTC month touched by those days again as the sum of its days."""
    last = day_hi - timedelta(days=1)
    _sum_into(UsageBucket, "d", "m", TruncMonth, month_floor(day_lo), next_month(last))


def _sum_into(model, source: str, span: str, trunc, lo: datetime, hi: datetime) -> None:
    """Replace the `span` buckets starting in [lo, hi) by the sums of their `source` ones."""
    keys = [f.name for f in model._meta.fields if f.name not in ("id", "span", "start")]
    keys = [k for k in keys if not k.endswith("_us")]
    model.objects.filter(span=span, start__gte=lo, start__lt=hi).delete()
    found = (
        model.objects.filter(span=source, start__gte=lo, start__lt=hi)
        .annotate(period=trunc("start", tzinfo=UTC))
        .values("period", *keys)
        .annotate(**{f"s_{c}": Sum(F(c)) for c in COLUMNS})
        .order_by()
    )
    model.objects.bulk_create(
        (
            model(
                span=span,
                start=row["period"],
                **{k: row[k] for k in keys},
                **{c: row[f"s_{c}"] or 0 for c in COLUMNS},
            )
            for row in found
        ),
        batch_size=500,
    )


def write_job_hours(cells: JobCells, meta: dict, gpu_types: dict, lo: datetime, hi: datetime):
    """The per-job hours of [lo, hi), replaced (each job with its quota, workspace, user)."""
    JobUsageBucket.objects.filter(span="h", start__gte=lo, start__lt=hi).delete()
    JobUsageBucket.objects.bulk_create(
        (
            JobUsageBucket(
                span="h",
                start=hour,
                job_id=job,
                quota_id=meta[job][0],
                workspace_id=meta[job][1],
                user_id=meta[job][2],
                gpu_type=gpu_types.get(meta[job][0], ""),
                **dict(zip(COLUMNS, values, strict=True)),
            )
            for (hour, job), values in cells.items()
            if any(values) and job in meta
        ),
        batch_size=500,
    )


def _add_totals(lo: datetime, final: datetime) -> None:
    """Hours that became final in this run, added once to each quota's running totals (what
    /metrics counts: they never go down, whatever the retention deletes)."""
    if final <= lo:
        return
    sums = (
        UsageBucket.objects.filter(span="h", start__gte=lo, start__lt=final, workspace_id=0)
        .values("quota_id")
        .annotate(**{f"s_{c}": Sum(F(c)) for c in COLUMNS})
        .order_by()
    )
    for row in sums:
        adds = {c: row[f"s_{c}"] or 0 for c in COLUMNS}
        changed = UsageTotal.objects.filter(quota_id=row["quota_id"]).update(
            **{c: F(c) + v for c, v in adds.items()}
        )
        if not changed:  # under the roll-up's lock: no other writer creates it meanwhile
            UsageTotal.objects.create(quota_id=row["quota_id"], **adds)
