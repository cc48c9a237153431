"""A job's Duration counts only the time its workers ran: a fault-tolerance restart that
waited in the queue (or in its crash-loop backoff) between attempts does not count."""

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse

from jobs.models import Job, Pod
from jobs.runtime import running_spans
from policy.display import format_duration, running_time
from policy.statuses import JobStatus, PodStatus
from tests.web.conftest import place, submit

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("spans", "until", "minutes"),
    [
        ([], 60, None),
        ([(None, None)], 60, None),  # placed, not running yet
        ([(0, None)], 30, 30),  # running now
        ([(0, 10)], 60, 10),  # finished
        ([(0, 10), (40, None)], 45, 15),  # queued 30 minutes between attempts
        ([(0, 10), (40, 50)], 50, 20),
        ([(0, 10), (5, 20)], 60, 20),  # overlapping workers (an async restart)
        ([(40, 50), (0, 10)], 60, 20),  # any order
        ([(0, 30), (10, 20)], 60, 30),  # one inside another
        ([(0, 10), (10, 20)], 60, 20),  # back to back
        ([(0, None)], -5, 0),  # clock skew: never negative
        ([(0, None), (20, 25)], 30, 30),  # an open span ends at `until`
        ([(0, 90)], 60, 60),  # nothing counts past the job's end
    ],
)
def test_running_time_unites_the_workers_spans(spans, until, minutes):
    as_times = [(None if s is None else at(s), None if e is None else at(e)) for s, e in spans]
    expected = None if minutes is None else timedelta(minutes=minutes)
    assert running_time(as_times, at(until)) == expected


@pytest.fixture
def restarted(researcher, workspace, quota, node) -> Job:
    """Attempt 1 ran 10 minutes and failed; the restart waited 30 minutes in the queue;
    attempt 2 runs from minute 40."""
    with time_machine.travel(T0, tick=False):
        job = submit(researcher, workspace, quota, name="ft", fault_tolerance=True)
        first = place(job, node)[0]
    Pod.objects.filter(pk=first.pk).update(
        status=PodStatus.FAILED, started_at=T0, finished_at=at(10), exit_code=1
    )
    Job.objects.filter(pk=job.pk).update(attempt=2)
    Pod.objects.create(
        job=job,
        attempt=2,
        rank=0,
        node=node,
        gpu_indices=first.gpu_indices,
        gpus=first.gpus,
        cpus=first.cpus,
        memory_gb=first.memory_gb,
        charged_quota=job.quota,
        status=PodStatus.RUNNING,
        started_at=at(40),
    )
    return job


def _durations(client, job: Job) -> tuple[str, str]:
    """The job page's Duration and the job list's last column for `job`."""
    page = client.get(reverse("web:detail", args=[job.pk])).text
    shown = re.search(r"<dt>Duration</dt><dd>([^<]*)</dd>", page).group(1)
    rows = client.get(reverse("web:list")).text
    row = re.search(rf'<tr[^>]*>\s*<td><a href="[^"]*/{job.pk}/">.*?</tr>', rows, re.S).group(0)
    listed = re.findall(r"<td>([^<]*)</td>", row)[-1]
    return shown, listed


def test_the_queued_time_between_attempts_is_not_duration(member_client, restarted):
    with time_machine.travel(at(45), tick=False):
        assert _durations(member_client, restarted) == ("15m 00s",) * 2
    Pod.objects.filter(job=restarted, attempt=2).update(
        status=PodStatus.SUCCEEDED, finished_at=at(50)
    )
    Job.objects.filter(pk=restarted.pk).update(status=JobStatus.COMPLETED, finished_at=at(50))
    with time_machine.travel(at(600), tick=False):
        assert _durations(member_client, restarted) == ("20m 00s",) * 2


def test_the_list_reads_every_jobs_spans_in_one_query(
    restarted, researcher, workspace, quota, node, django_assert_num_queries
):
    other = submit(researcher, workspace, quota, name="other", gpus_per_worker=0)
    with django_assert_num_queries(1):
        spans = running_spans([restarted.pk, other.pk])
    assert sorted(spans[restarted.pk]) == [(T0, at(10)), (at(40), None)]
    assert format_duration(running_time(spans[restarted.pk], at(45))) == "15m 00s"
    assert other.pk not in spans
