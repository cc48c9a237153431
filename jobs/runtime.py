"""How long jobs ran (the job list and page's Duration): their workers' running spans, read
in one query; `policy.display.running_time` unites them."""

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from django.db.models import Count, Max, Min, Q

from jobs.models import Pod

Span = tuple[datetime | None, datetime | None]


def running_spans(job_ids: Iterable[int]) -> dict[int, list[Span]]:
    """{job id: [(start, end)]}, one span per attempt (its workers run together; a worker
    restarted alone is an attempt of its own), open (end None) while a worker of it runs."""
    rows = (
        Pod.objects.filter(job_id__in=list(job_ids), started_at__isnull=False)
        .values("job_id", "attempt")
        .annotate(
            start=Min("started_at"),
            end=Max("finished_at"),
            running=Count("id", filter=Q(finished_at__isnull=True)),
        )
        .order_by()
    )
    spans: dict[int, list[Span]] = defaultdict(list)
    for row in rows:
        spans[row["job_id"]].append((row["start"], None if row["running"] else row["end"]))
    return spans


def pod_spans(pods: Iterable[Pod]) -> list[Span]:
    """The same from pods already loaded (the job page's)."""
    return [(pod.started_at, pod.finished_at) for pod in pods]
