"""A user's stop and the scheduler's admission race on one Inqueue job: exactly one wins.

Real threads on separate connections meet at a barrier and issue their compare-and-set
UPDATEs at the same moment. On PostgreSQL the second UPDATE waits for the first's row lock,
then re-checks `status = 'Inqueue'` and matches nothing; that is the behaviour under test.

Lock order: a job's row is locked before its pods' rows by every writer
(jobs.actions.workers). The scheduler preempts a running job while one of its workers
reports its exit: the preemption locks the job and then stops its pods, the report used to
lock its pod and then the job (to reconcile it). With the old order the two transactions
deadlock and PostgreSQL aborts one (the Kueue benchmark's cycles failed so).
"""

import threading
import time

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import transaction

from jobs.actions.stop import request_stop, stop_pods
from jobs.actions.transitions import TransitionConflict, transition
from jobs.actions.workers import apply_worker_state
from jobs.models import Job, JobEvent, Pod, PodDesired
from policy.statuses import ACTIVE_POD_STATUSES, FINAL_JOB_STATUSES, Actor, JobStatus, PodStatus
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


def test_a_preemption_and_a_worker_exit_of_the_same_job_never_deadlock(workspace, quota, node):
    owner = get_user_model().objects.create(username="lock-order")
    job = Job.objects.create(
        workspace=workspace,
        quota=quota,
        owner=owner,
        name="one",
        image="i",
        command="c",
        workers=1,
        gpus_per_worker=1,
        status=JobStatus.RUNNING,
    )
    # One worker: its exit ends the job, so the report writes the job row too.
    pod = Pod.objects.create(
        job=job,
        attempt=1,
        rank=0,
        node=node,
        gpu_indices=[0],
        gpus=1,
        charged_quota=quota,
        status=PodStatus.RUNNING,
    )
    locked = threading.Event()

    def preempt() -> int:
        # What the scheduler's preemption does in its transaction: claim the job, then
        # order its workers to stop. The pause lets the report take whatever it takes first.
        with transaction.atomic():
            Job.objects.filter(pk=job.pk).update(stop_requested_at=job.created_at)
            locked.set()
            time.sleep(0.5)
            return stop_pods(job.pk, reason="preempted", stop_as=PodStatus.PREEMPTED)

    def exit_report() -> bool:
        locked.wait(10)
        return apply_worker_state(Pod.objects.get(pk=pod.pk), running=False, exit_code=0)

    results = run_together(preempt, exit_report)
    assert [kind for kind, _ in results] == ["ok", "ok"], results
    # The report waited for the preemption (its worker had been told to stop meanwhile),
    # then ended the worker and the job.
    pod.refresh_from_db()
    assert pod.desired == PodDesired.STOP and pod.status not in ACTIVE_POD_STATUSES
    job.refresh_from_db()
    assert job.status in FINAL_JOB_STATUSES
