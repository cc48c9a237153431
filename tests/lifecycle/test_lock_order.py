"""A job's row is locked before its pods' rows, by every writer (jobs.actions.workers).

The scheduler preempts a running job while one of its workers reports its exit: the
preemption locks the job and then stops its pods, the report used to lock its pod and then
the job (to reconcile it). Real threads on PostgreSQL; with the old order the two
transactions deadlock and PostgreSQL aborts one (the Kueue benchmark's cycles failed so).
"""

import threading
import time

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import transaction

from jobs.actions.stop import stop_pods
from jobs.actions.workers import apply_worker_state
from jobs.models import Job, Pod, PodDesired
from jobs.statuses import ACTIVE_POD_STATUSES, FINAL_JOB_STATUSES, JobStatus, PodStatus
from tests.scheduler.threads import run_together

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL"),
]


@pytest.fixture(autouse=True)
def no_automatic_cycles(settings):
    settings.CONSOLE_LOOPS = "inprocess"


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
