"""A workspace's webhook hears its job being reclaimed, preempted and restarted, from a real
HTTP receiver that refuses each notification twice before accepting it.

The real path: the scheduler cycle borrows and reclaims, the agent's reports end the
workers, Automatic Fault Tolerance restarts the job; each change writes outbox rows in its
own transaction, and the console's in-process notification loop delivers them with
retries and backoff (`console.loops.Loop` over `notifications.delivery.deliver_due`).
"""

import time

import pytest
from django.db import connection

from console.loops import Loop
from jobs.actions.submit import JobSpec, create_job
from jobs.actions.workers import apply_worker_state
from jobs.models import Job, Pod
from jobs.scheduler.cycle import run_cycle
from notifications.delivery import deliver_due
from notifications.models import Delivery, DeliveryStatus
from policy.faulttolerance.policy import FtConfig
from policy.statuses import IdleResources, JobStatus
from quotas.models import Quota
from tests.conftest import make_node, make_user
from tests.notifications.conftest import webhook

pytestmark = pytest.mark.django_db(transaction=True)


def wait_until(predicate, timeout: float = 60.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def loop(settings):
    """The console's notification loop, polling often; commits wake nothing else (the test
    runs the scheduler itself)."""
    settings.CONSOLE_LOOPS = "inprocess"
    settings.NOTIFY_BACKOFF_BASE = 0.2
    settings.NOTIFY_BACKOFF_MAX = 1
    settings.SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM = 0  # the reclaim is what is tested here

    def deliver():
        try:
            return deliver_due()
        finally:
            connection.close()

    worker = Loop("notifications-test", deliver, interval=0.1)
    worker.start()
    yield worker
    worker.stop()
    worker.join(10)


def test_reclaimed_preempted_and_restarted_job_notifies_through_retries(
    loop, receiver, researcher, workspace, other_workspace, quota, other_quota
):
    hook = receiver(fail_first=2)
    webhook(
        other_workspace,
        hook.url,
        ["quota_reclaimed", "preempted", "restarted"],
        name="speech alerts",
    )
    make_node("node-0")
    Quota.objects.filter(pk=other_quota.pk).update(gpus=0)
    speaker = make_user("carol", other_workspace)
    # team-b's idle job borrows team-a's 8 unused GPUs, with fault tolerance.
    borrower = create_job(
        user=speaker,
        workspace=other_workspace,
        quota=other_quota,
        spec=JobSpec(
            name="sweep",
            image="busybox",
            command="train",
            gpus_per_worker=8,
            idle_resources=IdleResources.ONLY,
            fault_tolerance=True,
            ft_config=FtConfig(enabled=True).to_dict(),
        ),
    )
    run_cycle()
    for pod in Pod.objects.filter(job=borrower):
        apply_worker_state(pod, running=True)
    # team-a needs its GPUs: the scheduler reclaims them.
    create_job(
        user=researcher,
        workspace=workspace,
        quota=quota,
        spec=JobSpec(name="owner", image="busybox", command="train", gpus_per_worker=8),
    )
    assert run_cycle().preempted == (borrower.pk,)
    for pod in Pod.objects.filter(job=borrower, attempt=1):
        apply_worker_state(pod, running=False, exit_code=143)  # SIGTERM'd
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.PENDING and borrower.attempt == 2  # restarted

    def all_delivered():
        rows = list(Delivery.objects.filter(job=borrower).order_by("id"))
        return len(rows) == 3 and all(r.status == DeliveryStatus.DELIVERED for r in rows) and rows

    rows = wait_until(all_delivered, what="three notifications delivered")
    assert [r.event for r in rows] == ["quota_reclaimed", "preempted", "restarted"]
    for row in rows:
        assert row.attempts == 3
        assert [a.status_code for a in row.attempt_log.all()] == [503, 503, 200]
        times = [a.at for a in row.attempt_log.all()]
        assert times[2] - times[1] >= times[1] - times[0]  # the backoff grows
    accepted = [r["body"] for r in hook.accepted()]
    assert sorted(b["event"] for b in accepted) == ["preempted", "quota_reclaimed", "restarted"]
    restarted = next(b for b in accepted if b["event"] == "restarted")
    assert restarted["job"]["id"] == borrower.pk and restarted["job"]["attempt"] == 2
    assert restarted["detail"]["kind"] == "preemption"
    assert (
        "reclaimed by team-a"
        in next(b for b in accepted if b["event"] == "quota_reclaimed")["reason"]
    )
    assert len(hook.requests) == 9  # three notifications, three attempts each
    assert Job.objects.get(pk=borrower.pk).status == JobStatus.PENDING
