"""GPU and progress history of workers: the job page's charts and "GPUs held but idle".

Reads only. GPU samples (`WorkerGpuSample`) arrive with heartbeats about twice a minute per
running worker; progress samples (`ProgressSample`) with each new step the SDK reports.
Series are shaped for uPlot: one shared time axis (seconds since the epoch) and one list of
values per series, None where a series has no sample at that time.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Max, Min, QuerySet

from jobs.models import Job, Pod, ProgressSample, WorkerGpuSample
from protocol import limits

IDLE_UTILIZATION = limits.IDLE_UTILIZATION  # percent: busier at any sample is not idle
IDLE_WINDOW = timedelta(minutes=10)
IDLE_MIN_SAMPLES = 2  # at least a minute of evidence
MAX_POINTS = 4000  # newest samples per chart
MAX_METRICS = 8  # SDK metric names charted
# The job page's charts: key in job_series() → title.
CHARTS = [
    ("gpu_utilization", "GPU utilisation (%) per worker"),
    ("gpu_memory", "GPU memory used (GB) per worker"),
    ("progress", "Progress (step) per worker"),
    ("step_rate", "Step rate (steps/s) per worker"),
    ("metrics", "Training metrics reported by worker 0"),
]


@dataclass(frozen=True)
class IdleHolder:
    pod_id: int
    job_id: int
    job_name: str
    rank: int
    node: str
    gpus: int
    peak_utilization: int
    since: datetime


def idle_holders(pods: QuerySet[Pod], now: datetime, limit: int = 50) -> list[IdleHolder]:
    """Running workers among `pods` whose GPUs stayed at or below IDLE_UTILIZATION for the
    whole window (one grouped query). Only workers that ran for the whole window: a job's
    first minutes (loading data, compiling) are not "idle for 10 minutes"."""
    rows = (
        WorkerGpuSample.objects.filter(
            pod__in=pods, pod__started_at__lte=now - IDLE_WINDOW, at__gte=now - IDLE_WINDOW
        )
        .values("pod_id", "pod__job_id", "pod__job__name", "pod__rank", "pod__node__name")
        .annotate(peak=Max("utilization"), gpus=Max("gpus"), n=Count("id"), first=Min("at"))
        .filter(peak__lte=IDLE_UTILIZATION, n__gte=IDLE_MIN_SAMPLES)
        .order_by("-gpus", "pod_id")[:limit]
    )
    return [
        IdleHolder(
            pod_id=r["pod_id"],
            job_id=r["pod__job_id"],
            job_name=r["pod__job__name"],
            rank=r["pod__rank"],
            node=r["pod__node__name"] or "",
            gpus=r["gpus"],
            peak_utilization=r["peak"],
            since=r["first"],
        )
        for r in rows
    ]


def _aligned(points: dict[str, dict[float, float | None]]) -> dict:
    """{label: {t: value}} → uPlot's columns: shared sorted times, values per label."""
    times = sorted({t for series in points.values() for t in series})
    return {
        "t": times,
        "series": [
            {"label": label, "values": [series.get(t) for t in times]}
            for label, series in points.items()
        ],
    }


def _worker(rank: int, attempt: int, attempts: int) -> str:
    return f"worker {rank}" + (f" (attempt {attempt})" if attempts > 1 else "")


def job_series(job: Job) -> dict:
    """Every chart of the job page: GPU utilisation and memory per worker, progress steps and
    step rate per worker, and the SDK's metrics of worker 0 (two queries)."""
    attempts = job.attempt
    gpu_rows = list(
        WorkerGpuSample.objects.filter(pod__job=job)
        .order_by("-at", "-id")
        .values_list("pod__rank", "pod__attempt", "at", "utilization", "memory_used_mb")[
            :MAX_POINTS
        ]
    )
    utilization: dict[str, dict[float, float | None]] = defaultdict(dict)
    memory: dict[str, dict[float, float | None]] = defaultdict(dict)
    for rank, attempt, at, util, mem in reversed(gpu_rows):
        label = _worker(rank, attempt, attempts)
        utilization[label][at.timestamp()] = util
        memory[label][at.timestamp()] = round(mem / 1024, 2)

    progress_rows = list(
        ProgressSample.objects.filter(pod__job=job)
        .order_by("-at", "-id")
        .values_list("pod__rank", "pod__attempt", "at", "step", "rate", "metrics")[:MAX_POINTS]
    )
    steps: dict[str, dict[float, float | None]] = defaultdict(dict)
    rates: dict[str, dict[float, float | None]] = defaultdict(dict)
    metrics: dict[str, dict[float, float | None]] = defaultdict(dict)
    for rank, attempt, at, step, rate, values in reversed(progress_rows):
        label = _worker(rank, attempt, attempts)
        t = at.timestamp()
        steps[label][t] = step
        if rate is not None:
            rates[label][t] = round(rate, 4)
        if rank == 0:
            for name, value in (values or {}).items():
                numeric = isinstance(value, int | float) and not isinstance(value, bool)
                if numeric and (name in metrics or len(metrics) < MAX_METRICS):
                    metrics[str(name)][t] = value
    return {
        "gpu_utilization": _aligned(utilization),
        "gpu_memory": _aligned(memory),
        "progress": _aligned(steps),
        "step_rate": _aligned(rates),
        "metrics": _aligned(metrics),
    }
