"""Usage history's pure core (docs/usage-history.md): pods' intervals → hourly cells, and
the roll-up of per-quota numbers over the quota tree.

No Django here: the roll-up task (usage.actions.rollup) loads plain spans, these functions
cut them at hour boundaries, and the reports (usage.report) add the tree. Everything is
in integer GPU-microseconds, so a period's buckets equal the sum over its pods' intervals
exactly, whatever the order of addition.
"""

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

HOUR = timedelta(hours=1)
MICRO = timedelta(microseconds=1)
# The five numbers of a cell, in this order everywhere (buckets, rows, CSV, API).
FIELDS = ("in_quota", "borrowed", "lent", "idle_held", "waiting")
IN_QUOTA, BORROWED, LENT, IDLE_HELD, WAITING = range(5)


@dataclass(frozen=True, slots=True)
class PodSpan:
    """One pod from `Starting` to its final status (or now), split at charge moves:
    `charges` is ((from, quota charged), …) in time order, the first from `start`."""

    job_quota_id: int
    workspace_id: int
    user_id: int
    gpus: int
    start: datetime
    end: datetime
    charges: tuple[tuple[datetime, int], ...]
    job_id: int = 0


@dataclass(frozen=True, slots=True)
class Span:
    """GPUs of one job's quota, workspace and user over [start, end): a waiting job's asked-for
    GPUs, or a pod's GPUs held but idle."""

    job_quota_id: int
    workspace_id: int
    user_id: int
    gpus: int
    start: datetime
    end: datetime
    job_id: int = 0


# (hour start, quota id, workspace id, user id) → [in quota, borrowed, lent, idle, waiting];
# workspace and user 0: the quota's own row.
CellKey = tuple[datetime, int, int, int]
Cells = dict[CellKey, list[int]]


def floor_hour(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def ceil_hour(at: datetime) -> datetime:
    floor = floor_hour(at)
    return floor if floor == at else floor + HOUR


def split_hours(
    start: datetime, end: datetime, lo: datetime, hi: datetime
) -> Iterator[tuple[datetime, int]]:
    """(hour start, microseconds) of [start, end) ∩ [lo, hi), hour by hour."""
    start, end = max(start, lo), min(end, hi)
    while start < end:
        hour = floor_hour(start)
        stop = min(hour + HOUR, end)
        yield hour, (stop - start) // MICRO
        start = stop


def charge_segments(pod: PodSpan) -> Iterator[tuple[datetime, datetime, int]]:
    """(from, to, quota charged) of the pod's life."""
    for i, (since, quota_id) in enumerate(pod.charges):
        until = pod.charges[i + 1][0] if i + 1 < len(pod.charges) else pod.end
        since, until = max(since, pod.start), min(until, pod.end)
        if since < until:
            yield since, until, quota_id


def _add(cells: Cells, key: CellKey, field: int, amount: int) -> None:
    row = cells.get(key)
    if row is None:
        row = cells[key] = [0, 0, 0, 0, 0]
    row[field] += amount


def _add_job(cells: Cells, span, hour: datetime, field: int, amount: int) -> None:
    """To the job's quota row and its (quota, workspace, user) row."""
    _add(cells, (hour, span.job_quota_id, 0, 0), field, amount)
    _add(cells, (hour, span.job_quota_id, span.workspace_id, span.user_id), field, amount)


def bucket_cells(
    pods: Iterable[PodSpan],
    waits: Iterable[Span],
    idles: Iterable[Span],
    lo: datetime,
    hi: datetime,
) -> Cells:
    """Every cell of the hours in [lo, hi). In quota: the job's pods charged to its own
    quota; borrowed: charged to another (which counts it as lent)."""
    cells: Cells = {}
    for pod in pods:
        for since, until, charged in charge_segments(pod):
            own = charged == pod.job_quota_id
            for hour, us in split_hours(since, until, lo, hi):
                amount = us * pod.gpus
                _add_job(cells, pod, hour, IN_QUOTA if own else BORROWED, amount)
                if not own:
                    _add(cells, (hour, charged, 0, 0), LENT, amount)
    for field, spans in ((WAITING, waits), (IDLE_HELD, idles)):
        for span in spans:
            for hour, us in split_hours(span.start, span.end, lo, hi):
                _add_job(cells, span, hour, field, us * span.gpus)
    return cells


# (hour start, job id) → [in quota, borrowed, 0, idle, waiting]: the per-job report's cells.
JobCells = dict[tuple[datetime, int], list[int]]


def job_cells(
    pods: Iterable[PodSpan],
    waits: Iterable[Span],
    idles: Iterable[Span],
    lo: datetime,
    hi: datetime,
) -> JobCells:
    """Every job's cells of the hours in [lo, hi): the same numbers as its (quota,
    workspace, user) cells in `bucket_cells`, per job (nothing is lent by a job)."""
    cells: JobCells = {}
    for pod in pods:
        for since, until, charged in charge_segments(pod):
            field = IN_QUOTA if charged == pod.job_quota_id else BORROWED
            for hour, us in split_hours(since, until, lo, hi):
                _add(cells, (hour, pod.job_id), field, us * pod.gpus)  # type: ignore[arg-type]
    for field, spans in ((WAITING, waits), (IDLE_HELD, idles)):
        for span in spans:
            for hour, us in split_hours(span.start, span.end, lo, hi):
                _add(cells, (hour, span.job_id), field, us * span.gpus)  # type: ignore[arg-type]
    return cells


def waiting_spans(
    events: Iterable[tuple[datetime, str]], waiting: frozenset[str], now: datetime
) -> Iterator[tuple[datetime, datetime]]:
    """[from, to) of a job's waits from its status changes (time, to status) in order."""
    since = None
    for at, to_status in events:
        if to_status in waiting:
            since = at if since is None else since
        elif since is not None:
            yield since, at
            since = None
    if since is not None and since < now:
        yield since, now


def idle_spans(
    samples: Iterable[tuple[datetime, int | None]], threshold: int, max_gap: timedelta
) -> Iterator[tuple[datetime, datetime]]:
    """[from, to) between two consecutive GPU samples of a pod that were both at or below
    `threshold` percent and at most `max_gap` apart (unknown utilisation is not idle)."""
    previous = None
    for at, utilization in samples:
        idle = utilization is not None and utilization <= threshold
        if previous is not None and idle and at - previous <= max_gap:
            yield previous, at
        previous = at if idle else None


def subtree_of(parents: Mapping[int, int | None]) -> dict[int, set[int]]:
    """quota id → itself and every descendant, from (quota id → parent id or None). A
    parent outside the map, or a cycle, stops the walk (never loops)."""
    members: dict[int, set[int]] = defaultdict(set)
    for quota_id in parents:
        seen, current = set(), quota_id
        while current is not None and current not in seen:
            seen.add(current)
            members[current].add(quota_id)
            current = parents.get(current)
    return dict(members)


def roll_up_tree(
    totals: Mapping[tuple[int, datetime], list[int]], parents: Mapping[int, int | None]
) -> dict[tuple[int, datetime], list[int]]:
    """Per-quota numbers ((quota, period) → FIELDS) → each quota's subtree total. Lending
    and borrowing between two quotas of the same subtree are kept (each quota's numbers
    are what its jobs did); a flat tree (every parent None) returns the numbers as they are.
    The tree is the current one: after a quota moves, its history counts under its new
    parent (docs/usage-history.md)."""
    if all(parent is None for parent in parents.values()):
        return dict(totals)
    ancestors: dict[int, list[int]] = defaultdict(list)
    for root, members in subtree_of(parents).items():
        for member in members:
            ancestors[member].append(root)
    out: dict[tuple[int, datetime], list[int]] = {}
    for (quota_id, period), values in totals.items():
        for holder in ancestors.get(quota_id) or [quota_id]:
            row = out.setdefault((holder, period), [0, 0, 0, 0, 0])
            for i, value in enumerate(values):
                row[i] += value
    return out


def period_start(at: datetime, granularity: str) -> datetime:
    """The hour, UTC day or UTC month that `at` falls in."""
    at = floor_hour(at)
    if granularity == "hour":
        return at
    day = at.replace(hour=0)
    return day if granularity == "day" else day.replace(day=1)


# -- historical fair share (docs/quota-tree.md) ---------------------------------------------
def decayed_gpu_seconds(
    buckets: Iterable[tuple[datetime, datetime, int]], now: datetime, half_life_s: float
) -> float:
    """GPU-seconds decayed to `now`: each bucket's [start, end) GPU-microseconds, spread
    evenly over it, weighted by 2^(-age / half-life) (Slurm's PriorityDecayHalfLife),
    integrated exactly over the bucket. An open bucket counts up to `now`."""
    h = max(half_life_s, 1.0)
    total = 0.0
    for start, end, us in buckets:
        end = min(end, now)
        if us <= 0 or end <= start:
            continue
        young, old = (now - end).total_seconds(), (now - start).total_seconds()
        mean = h / math.log(2) * (2 ** (-young / h) - 2 ** (-old / h)) / (old - young)
        total += us / 1e6 * mean
    return total


def decayed_on(gpu_seconds: float, since: datetime, now: datetime, half_life_s: float) -> float:
    """A decayed sum as of `since`, decayed on to `now` (nothing added meanwhile)."""
    age = max((now - since).total_seconds(), 0.0)
    return gpu_seconds * 2 ** (-age / max(half_life_s, 1.0))


def average_gpus(gpu_seconds: float, half_life_s: float) -> float:
    """Decayed GPU-seconds as GPUs: a quota that held G GPUs for ever has G x half-life /
    ln 2 decayed GPU-seconds, so this is its exponentially weighted average GPUs."""
    return gpu_seconds * math.log(2) / max(half_life_s, 1.0)
