"""A user's stop and the scheduler's admission race on one Inqueue job: exactly one wins.

Real threads on separate connections meet at a barrier and issue their compare-and-set
UPDATEs at the same moment. On PostgreSQL the second UPDATE waits for the first's row lock,
then re-checks `status = 'Inqueue'` and matches nothing; that is the behaviour under test.
"""

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model

from jobs.actions.stop import request_stop
from jobs.actions.transitions import TransitionConflict, transition
from jobs.models import Job, JobEvent
from jobs.statuses import Actor, JobStatus
from tests.scheduler.threads import run_together

S = JobStatus
ROUNDS = 20
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL"),
]


@pytest.fixture(autouse=True)
def no_automatic_cycles(settings):
    # Commits wake no loop: only the two racing writers touch the job.
    settings.CONSOLE_LOOPS = "inprocess"


@pytest.fixture
def inqueue_job(workspace, quota):
    owner = get_user_model().objects.create(username="racer")

    def _make() -> Job:
        return Job.objects.create(
            workspace=workspace,
            quota=quota,
            owner=owner,
            name="race",
            image="pytorch:2",
            command="python train.py",
            status=S.INQUEUE,
            queue_position=1,
        )

    return _make


def _moves(job: Job) -> list[str]:
    return list(
        JobEvent.objects.filter(job=job, from_status=S.INQUEUE).values_list("to_status", flat=True)
    )


def test_stop_transition_against_admission_transition(inqueue_job):
    for _ in range(ROUNDS):
        job = inqueue_job()

        # Both writers decided on the Inqueue they saw: each names it as the expected status.
        def stop(job_id=job.pk):
            transition(
                Job.objects.get(pk=job_id),
                S.STOPPED,
                reason="stop",
                actor=Actor.USER,
                expected=S.INQUEUE,
            )
            return S.STOPPED

        def admit(job_id=job.pk):
            transition(
                Job.objects.get(pk=job_id),
                S.STARTING,
                reason="placed",
                actor=Actor.SCHEDULER,
                expected=S.INQUEUE,
            )
            return S.STARTING

        results = run_together(stop, admit)

        won = [value for kind, value in results if kind == "ok"]
        lost = [value for kind, value in results if kind == "error"]
        assert len(won) == 1, results
        assert len(lost) == 1 and isinstance(lost[0], TransitionConflict), results
        job.refresh_from_db()
        assert job.status == won[0]
        assert _moves(job) == [won[0]]  # exactly one status event, the winner's


def test_request_stop_against_admission(inqueue_job, researcher):
    for _ in range(ROUNDS):
        job = inqueue_job()

        def stop(job_id=job.pk):
            return request_stop(Job.objects.get(pk=job_id), user=researcher).status

        def admit(job_id=job.pk):
            transition(
                Job.objects.get(pk=job_id),
                S.STARTING,
                reason="placed",
                actor=Actor.SCHEDULER,
                expected=S.INQUEUE,
            )

        results = run_together(stop, admit)

        job.refresh_from_db()
        moves = _moves(job)
        assert len(moves) == 1, (moves, results)
        stop_kind, _ = results[0]
        assert stop_kind == "ok", results  # a stop never fails: it adapts to who won
        if moves == [S.STOPPED]:
            assert isinstance(results[1][1], TransitionConflict)
            assert job.status == S.STOPPED
        else:
            # Admission won; the stop retried and became a graceful stop of the placed job.
            assert results[1][0] == "ok"
            assert job.status == S.STARTING
            assert job.stop_requested_at is not None
            assert JobEvent.objects.filter(job=job, reason__startswith="stop requested").exists()
