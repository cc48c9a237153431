"""Every (from, to) pair of the nine statuses through `transitions.transition` on a row."""

import itertools

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.utils import timezone

from jobs.actions.transitions import IllegalTransition, TransitionConflict, transition
from jobs.models import Job, JobEvent
from policy.statuses import ALLOWED_TRANSITIONS, FINAL_JOB_STATUSES, Actor, JobStatus

S = JobStatus
ALL_PAIRS = list(itertools.product(JobStatus, JobStatus))
# docs/statuses.md written out by hand, so a slip in ALLOWED_TRANSITIONS fails here.
EXPECTED_ALLOWED = {
    (S.PENDING, S.INQUEUE),
    (S.PENDING, S.STARTING),
    (S.PENDING, S.STOPPED),  # a user stops a job the scheduler has not looked at yet
    (S.PENDING, S.TERMINATED),
    (S.INQUEUE, S.STARTING),
    (S.INQUEUE, S.STOPPED),
    (S.INQUEUE, S.TERMINATED),
    (S.STARTING, S.RUNNING),
    (S.STARTING, S.FAILED),
    (S.STARTING, S.STOPPED),
    (S.STARTING, S.PREEMPTED),
    (S.STARTING, S.TERMINATED),
    (S.STARTING, S.PENDING),  # fault-tolerance restart / lost node
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.STOPPED),
    (S.RUNNING, S.PREEMPTED),
    (S.RUNNING, S.TERMINATED),
    (S.RUNNING, S.PENDING),
    (S.FAILED, S.PENDING),  # retried failure as a new attempt
    (S.PREEMPTED, S.PENDING),  # preempted, then re-queued
}
NOW = timezone.datetime(2025, 3, 1, 12, 0, tzinfo=timezone.UTC)


def test_the_table_is_the_design():
    allowed = {(a, b) for a, targets in ALLOWED_TRANSITIONS.items() for b in targets}
    assert allowed == EXPECTED_ALLOWED
    assert len(ALL_PAIRS) == 81


@pytest.fixture
def make_job(workspace, quota):
    # No password: hashing one per test would cost most of this 81-case table's time.
    owner = get_user_model().objects.create(username="owner")

    def _make(status: JobStatus) -> Job:
        with time_machine.travel(NOW.replace(hour=9), tick=False):
            return Job.objects.create(
                workspace=workspace,
                quota=quota,
                owner=owner,
                name="train",
                image="pytorch:2",
                command="python train.py",
                status=status,
                status_reason="before",
                queue_position=3 if status == S.INQUEUE else None,
            )

    return _make


@pytest.mark.parametrize(
    ("from_status", "to_status"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS]
)
def test_transition_pair(make_job, from_status, to_status):
    job = make_job(from_status)
    before = Job.objects.values().get(pk=job.pk)

    if (from_status, to_status) not in EXPECTED_ALLOWED:
        with pytest.raises(IllegalTransition) as raised:
            transition(job, to_status, reason="nope", actor=Actor.SYSTEM)
        assert str(raised.value) == f"a job cannot go from {from_status} to {to_status}"
        assert Job.objects.values().get(pk=job.pk) == before
        assert job.status == from_status
        assert not JobEvent.objects.filter(job=job).exists()
        return

    with time_machine.travel(NOW, tick=False):
        transition(job, to_status, reason="because", actor=Actor.SCHEDULER)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.status_reason, row.updated_at) == (to_status, "because", NOW)
    assert job.status == to_status  # the in-memory object follows the row
    [event] = JobEvent.objects.filter(job=job)
    assert (event.from_status, event.to_status, event.reason, event.actor) == (
        from_status,
        to_status,
        "because",
        Actor.SCHEDULER,
    )
    assert row.finished_at == (NOW if to_status in FINAL_JOB_STATUSES else None)
    assert row.started_at == (NOW if to_status == S.RUNNING else None)
    if to_status != S.INQUEUE:
        assert row.queue_position is None


def test_extra_fields_are_written_in_the_same_update(make_job):
    job = make_job(S.PENDING)
    transition(job, S.INQUEUE, reason="quota full", actor=Actor.SCHEDULER, queue_position=2)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.queue_position) == (S.INQUEUE, 2)


def test_conflict_when_the_row_moved_on(make_job):
    job = make_job(S.INQUEUE)
    Job.objects.filter(pk=job.pk).update(status=S.STOPPED)  # another writer won
    with pytest.raises(TransitionConflict) as raised:
        transition(job, S.STARTING, reason="placed", actor=Actor.SCHEDULER)
    assert raised.value.expected == S.INQUEUE
    assert Job.objects.get(pk=job.pk).status == S.STOPPED
    assert job.status == S.INQUEUE  # untouched in memory too
    assert not JobEvent.objects.exists()


def test_expected_overrides_the_in_memory_status(make_job):
    job = make_job(S.PENDING)
    with pytest.raises(TransitionConflict):
        transition(job, S.STARTING, reason="x", actor=Actor.SCHEDULER, expected=S.INQUEUE)
    transition(job, S.STARTING, reason="x", actor=Actor.SCHEDULER, expected=S.PENDING)
    assert Job.objects.get(pk=job.pk).status == S.STARTING


def test_illegal_is_checked_before_the_database(make_job, django_assert_num_queries):
    job = make_job(S.COMPLETED)
    with django_assert_num_queries(0), pytest.raises(IllegalTransition):
        transition(job, S.RUNNING, reason="x", actor=Actor.SYSTEM)


# -- finish_many: many jobs to final statuses in one UPDATE and one INSERT ------------------


def test_finish_many_writes_what_transition_writes(make_job, django_assert_num_queries):
    from jobs.actions.transitions import Finish, finish_many

    done, failed, later = make_job(S.RUNNING), make_job(S.RUNNING), make_job(S.RUNNING)
    Job.objects.filter(pk=failed.pk).update(exit_code=7)
    moves = [
        Finish(done, S.COMPLETED, "all 1 worker(s) exited 0", 0),
        Finish(failed, S.FAILED, "worker 0 exited 7"),  # no exit code: the stored one stays
    ]
    # One UPDATE, one INSERT of events, one look-up of the notification rules for both.
    with time_machine.travel(NOW, tick=False), django_assert_num_queries(3):
        assert finish_many(moves, actor=Actor.AGENT, now=NOW) == {done.pk, failed.pk}
    # As transition writes them (compared with a third job moved the one-by-one way).
    with time_machine.travel(NOW, tick=False):
        transition(later, S.COMPLETED, reason="all 1 worker(s) exited 0", actor=Actor.AGENT,
                   exit_code=0)  # fmt: skip
    fields = ("status", "status_reason", "updated_at", "finished_at", "queue_position",
              "exit_code", "started_at")  # fmt: skip
    assert Job.objects.values(*fields).get(pk=done.pk) == Job.objects.values(*fields).get(
        pk=later.pk
    )
    assert Job.objects.values_list("status", "exit_code").get(pk=failed.pk) == (S.FAILED, 7)
    for job, status in ((done, S.COMPLETED), (failed, S.FAILED)):
        assert (job.status, job.finished_at, job.queue_position) == (status, NOW, None)
        [event] = JobEvent.objects.filter(job=job)
        assert (event.from_status, event.to_status, event.actor, event.user) == (
            S.RUNNING, status, Actor.AGENT, None,
        )  # fmt: skip
    assert done.exit_code == 0


def test_finish_many_leaves_a_job_another_writer_moved(make_job):
    from jobs.actions.transitions import Finish, finish_many

    moved, mine = make_job(S.RUNNING), make_job(S.RUNNING)
    Job.objects.filter(pk=moved.pk).update(status=S.STOPPED)  # another writer won
    moves = [Finish(moved, S.COMPLETED, "exited 0", 0), Finish(mine, S.COMPLETED, "exited 0", 0)]
    assert finish_many(moves, actor=Actor.AGENT, now=NOW) == {mine.pk}
    assert Job.objects.get(pk=moved.pk).status == S.STOPPED
    assert moved.status == S.RUNNING  # untouched in memory too
    assert list(JobEvent.objects.values_list("job_id", flat=True)) == [mine.pk]


def test_finish_many_checks_every_move_before_the_database(make_job, django_assert_num_queries):
    from jobs.actions.transitions import Finish, finish_many

    running, pending = make_job(S.RUNNING), make_job(S.PENDING)
    with django_assert_num_queries(0), pytest.raises(IllegalTransition):
        finish_many(
            [Finish(running, S.COMPLETED, "x"), Finish(pending, S.COMPLETED, "x")],
            actor=Actor.AGENT,
            now=NOW,
        )
    with django_assert_num_queries(0), pytest.raises(ValueError, match="final statuses only"):
        finish_many([Finish(running, S.PENDING, "x")], actor=Actor.AGENT, now=NOW)
    assert finish_many([], actor=Actor.AGENT, now=NOW) == set()
