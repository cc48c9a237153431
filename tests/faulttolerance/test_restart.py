"""The fault-tolerance shell: worker exits, preemption and lost nodes through the real pod
reconciler (jobs.actions.workers), the node monitor and the scheduler cycle."""

from datetime import UTC, datetime, timedelta

import time_machine

from agents.node_monitor import run_node_monitor
from cluster.models import Node, NodeState
from jobs.actions.stop import request_stop
from jobs.actions.workers import apply_worker_state
from jobs.models import Checkpoint, Job, Pod, PodDesired, RestartRecord
from jobs.scheduler.cycle import run_cycle
from policy.faulttolerance.policy import FtConfig, RunType
from policy.statuses import Actor, JobStatus, PodStatus
from tests.conftest import make_node

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NCCL = "step 40\nRuntimeError: NCCL watchdog: collective operation timeout after 600000ms"


def events(job: Job) -> list[tuple[str, str]]:
    return [(e.from_status, e.to_status) for e in job.events.order_by("id") if e.to_status]


def fail(pod: Pod, code: int, error: str, now=None) -> None:
    assert apply_worker_state(
        Pod.objects.get(pk=pod.pk), running=False, exit_code=code, error=error, now=now
    )


def test_retryable_failure_restarts_the_whole_job_as_a_new_attempt(ft_job):
    job, (p0, p1) = ft_job([make_node("n-a"), make_node("n-b")])
    fail(p0, 1, NCCL)
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert job.attempt == 2 and job.restart_count == 1
    assert job.status_reason.startswith("restart 1/3: worker 0 exited 1, RuntimeError: NCCL")
    assert job.exit_code == 1 and job.restart_not_before is None  # first restart: no backoff
    assert events(job)[-1] == ("Running", "Pending")
    # The rest of the old attempt is ordered to stop; the new attempt waits for it.
    p1.refresh_from_db()
    assert (p1.desired, p1.stop_as) == (PodDesired.STOP, PodStatus.STOPPED)
    assert "restarting as attempt 2" in p1.stop_reason
    (record,) = RestartRecord.objects.filter(job=job)
    assert (record.from_attempt, record.to_attempt, record.kind) == (1, 2, "failure")
    assert (record.worker_rank, record.node_name, record.exit_code) == (0, "n-a", 1)
    assert (record.rule, record.restarts_used, record.restarts_max) == ("NCCL timeout", 1, 3)
    assert "collective operation timeout" in record.error_excerpt


def test_scheduler_places_the_new_attempt_only_after_the_old_workers_exit(ft_job):
    job, (p0, p1) = ft_job([make_node("n-a"), make_node("n-b")])
    Checkpoint.objects.create(job=job, attempt=1, step=30, path="/ck/step-30", committed=True)
    Checkpoint.objects.create(job=job, attempt=1, step=20, path="/ck/step-20", committed=True)
    fail(p0, 1, NCCL)
    run_cycle()
    job.refresh_from_db()
    assert job.status == JobStatus.INQUEUE
    assert "waiting for 1 worker of the previous attempt to exit" in job.status_reason
    assert not Pod.objects.filter(job=job, attempt=2).exists()
    assert job.resume_from == "/ck/step-30"
    assert apply_worker_state(Pod.objects.get(pk=p1.pk), running=False, exit_code=143)
    assert Pod.objects.get(pk=p1.pk).status == PodStatus.STOPPED
    run_cycle()
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING
    new = list(Pod.objects.filter(job=job, attempt=2).order_by("rank"))
    assert [p.rank for p in new] == [0, 1]
    for pod in new:
        apply_worker_state(pod, running=True)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    assert RestartRecord.objects.get(job=job).running_at is not None
    assert events(job) == [
        ("Running", "Pending"),
        ("Pending", "Inqueue"),
        ("Inqueue", "Starting"),
        ("Starting", "Running"),
    ]


def test_a_crash_loop_backs_off_and_the_scheduler_waits(ft_job, node):
    job, (pod,) = ft_job([node], restart_count=2)
    with time_machine.travel(T0, tick=False):
        fail(pod, 1, NCCL)
        job.refresh_from_db()
        assert job.status == JobStatus.PENDING and job.restart_count == 3
        assert job.restart_not_before == T0 + timedelta(seconds=20)
        assert "restart 3/3" in job.status_reason and "backing off 20s" in job.status_reason
        run_cycle()
        assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING
    with time_machine.travel(T0 + timedelta(seconds=21), tick=False):
        run_cycle()
        assert Job.objects.get(pk=job.pk).status == JobStatus.STARTING


def test_past_the_budget_the_job_fails_with_the_exit_code_and_log_tail(ft_job, node):
    job, (pod,) = ft_job([node], restart_count=3)
    fail(pod, 1, NCCL)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.exit_code == 1
    assert "restart budget used up (3/3)" in job.status_reason
    assert "last log lines:\nstep 40\nRuntimeError: NCCL" in job.status_reason
    assert not RestartRecord.objects.exists()


def test_a_user_error_is_not_retried(ft_job, node):
    job, (pod,) = ft_job([node])
    trace = 'File "train.py", line 3\n    def (\n        ^\nSyntaxError: invalid syntax'
    fail(pod, 1, trace)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.attempt == 1
    assert "not retryable: SyntaxError" in job.status_reason
    assert events(job) == [("Running", "Failed")]


def test_on_failure_policy_retries_a_user_error(ft_job, node):
    job, (pod,) = ft_job([node], ft=FtConfig(enabled=True, policy="OnFailure"))
    fail(pod, 1, "SyntaxError: invalid syntax")
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING


def test_without_fault_tolerance_a_failure_ends_the_job(ft_job, node):
    job, (pod,) = ft_job([node], ft=FtConfig(enabled=False))
    fail(pod, 1, NCCL)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.status_reason.startswith("worker 0 exited 1")


def test_preemption_shows_preempted_then_pending_without_using_the_budget(ft_job, node):
    job, (pod,) = ft_job([node], restart_count=3)
    request_stop(
        job,
        actor=Actor.SCHEDULER,
        final_status=JobStatus.PREEMPTED,
        reason="reclaimed by team-b for job b2",
    )
    assert apply_worker_state(Pod.objects.get(pk=pod.pk), running=False, exit_code=143)
    job.refresh_from_db()
    assert events(job) == [("Running", "Preempted"), ("Preempted", "Pending")]
    assert job.status == JobStatus.PENDING and job.attempt == 2
    assert (job.restart_count, job.preemption_count) == (3, 1)
    assert job.stop_requested_at is None and job.restart_not_before is None
    assert "restart after preemption 1" in job.status_reason
    record = RestartRecord.objects.get(job=job)
    assert record.kind == "preemption" and record.worker_rank is None
    assert Pod.objects.get(pk=pod.pk).status == PodStatus.PREEMPTED


def test_preemption_without_fault_tolerance_ends_preempted(ft_job, node):
    job, (pod,) = ft_job([node], ft=FtConfig(enabled=False))
    request_stop(job, actor=Actor.SCHEDULER, final_status=JobStatus.PREEMPTED)
    apply_worker_state(Pod.objects.get(pk=pod.pk), running=False, exit_code=143)
    assert Job.objects.get(pk=job.pk).status == JobStatus.PREEMPTED


def _silence(node: Node, since: datetime) -> None:
    Node.objects.filter(pk=node.pk).update(
        state=NodeState.READY, last_heartbeat_at=since, heartbeat_deadline=since
    )


def test_a_lost_node_restarts_the_job_as_a_new_attempt(ft_job, settings):
    settings.NODE_LOST_TIMEOUT = 60
    a, b = make_node("n-a"), make_node("n-b")
    job, (p0, p1) = ft_job([a, b], restart_count=3)
    _silence(a, T0)
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False):
        run_node_monitor()
        job.refresh_from_db()
        # A lost connection is not a dead process: Unknown, the job keeps its status.
        assert Pod.objects.get(pk=p0.pk).status == PodStatus.UNKNOWN
        assert job.status == JobStatus.RUNNING
    with time_machine.travel(T0 + timedelta(seconds=61), tick=False):
        Node.objects.filter(pk=b.pk).update(heartbeat_deadline=T0 + timedelta(hours=1))
        run_node_monitor()
    job.refresh_from_db()
    assert Pod.objects.get(pk=p0.pk).status == PodStatus.LOST
    assert job.status == JobStatus.PENDING and job.attempt == 2
    assert (job.restart_count, job.node_loss_count) == (3, 1)
    assert "node loss 1" in job.status_reason and "node lost" in job.status_reason
    assert RestartRecord.objects.get(job=job).kind == "node_lost"
    assert Pod.objects.get(pk=p1.pk).desired == PodDesired.STOP


def test_a_lost_node_without_fault_tolerance_fails_the_job(ft_job, settings, node):
    settings.NODE_LOST_TIMEOUT = 60
    job, _ = ft_job([node], ft=FtConfig(enabled=False))
    _silence(node, T0)
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False):
        run_node_monitor()
    with time_machine.travel(T0 + timedelta(seconds=61), tick=False):
        run_node_monitor()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "node lost" in job.status_reason


def test_asynchronous_restarts_only_the_failed_worker(ft_job):
    a, b = make_node("n-a"), make_node("n-b")
    job, (p0, p1) = ft_job([a, b], ft=FtConfig(enabled=True, run_type=RunType.ASYNCHRONOUS))
    fail(p1, 137, "Killed")
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.attempt == 2 and job.restart_count == 1
    new = Pod.objects.get(job=job, attempt=2)
    assert (new.rank, new.node_id, new.gpu_indices, new.status) == (1, b.pk, [1], "Starting")
    assert Pod.objects.get(pk=p0.pk).desired == PodDesired.RUN  # the others keep running
    record = RestartRecord.objects.get(job=job)
    assert not record.whole_job and record.rule == "OOM killed" and record.running_at is None
    apply_worker_state(new, running=True)
    assert RestartRecord.objects.get(job=job).running_at is not None
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    # The job completes once every current worker has succeeded.
    apply_worker_state(Pod.objects.get(pk=p0.pk), running=False, exit_code=0)
    apply_worker_state(Pod.objects.get(pk=new.pk), running=False, exit_code=0)
    assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED


def test_a_lost_worker_of_an_asynchronous_job_restarts_the_whole_job(ft_job, settings, node):
    settings.NODE_LOST_TIMEOUT = 60
    job, _ = ft_job([node], ft=FtConfig(enabled=True, run_type=RunType.ASYNCHRONOUS))
    _silence(node, T0)
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False):
        run_node_monitor()
    with time_machine.travel(T0 + timedelta(seconds=61), tick=False):
        run_node_monitor()
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.node_loss_count == 1
