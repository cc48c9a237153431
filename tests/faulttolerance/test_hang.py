"""Hang judgement (pure) and the job monitor: deadlines, claiming, actions, max runtime."""

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from cluster.models import GpuDevice
from jobs.actions.workers import apply_worker_state
from jobs.job_monitor import run_job_monitor
from jobs.models import Job, Pod, PodDesired, RestartRecord
from policy.faulttolerance import hang
from policy.faulttolerance.policy import FtConfig, HangAction
from policy.statuses import JobStatus, PodStatus

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HANG = FtConfig(enabled=True, hang_detection=True, hang_timeout=600)


# --- pure ---------------------------------------------------------------------------------


def test_repeated_identical_lines_are_not_progress():
    new, memory = hang.distinct_lines([], ["loading", "WARN disk slow", "WARN disk slow"])
    assert new == 2 and len(memory) == 2
    again, memory2 = hang.distinct_lines(memory, ["WARN disk slow"] * 50 + ["", "loading"])
    assert again == 0 and memory2 == memory


def test_timestamps_do_not_make_a_repeat_new():
    _, memory = hang.distinct_lines([], ["2026-03-01T12:00:00.123Z WARN retrying"])
    new, _ = hang.distinct_lines(memory, ["2026-03-01T12:05:09.999Z WARN retrying"])
    assert new == 0
    new, _ = hang.distinct_lines(memory, ["12:05:09 step 12 loss 0.3"])
    assert new == 1


def test_memory_is_bounded_and_a_long_cycle_is_new_again():
    lines = [f"line {i}" for i in range(hang.RECENT_LINES + 5)]
    new, memory = hang.distinct_lines([], lines)
    assert new == len(lines) and len(memory) == hang.RECENT_LINES
    assert hang.distinct_lines(memory, ["line 0"])[0] == 1


@pytest.mark.parametrize(
    ("progress", "line", "now", "hung"),
    [
        (None, None, 599, False),
        (None, None, 600, True),  # nothing at all since the attempt started running
        (300, None, 899, False),
        (300, None, 900, True),
        (None, 500, 1099, False),
        (100, 500, 700, True),  # progress reports exist: log lines do not count
    ],
)
def test_is_hung(progress, line, now, hung):
    def at(seconds):
        return None if seconds is None else T0 + timedelta(seconds=seconds)

    state = hang.HangInput(600, T0, at(progress), at(line))
    assert hang.is_hung(state, at(now)) is hung


def test_reason_names_idle_gpus_as_evidence():
    state = hang.HangInput(600, T0, T0, None, gpu_utilization=[0, 0])
    text = hang.hang_reason(state, T0 + timedelta(seconds=700))
    assert text == (
        "no new progress step for 700s (hang timeout 600s); its 2 GPUs are idle (0% utilization)"
    )
    busy = hang.HangInput(600, T0, None, None, gpu_utilization=[0, 87])
    assert "GPU utilization 87% at most" in hang.hang_reason(busy, T0)


# --- the monitor ----------------------------------------------------------------------------


def _start(job: Job, pods, now) -> None:
    """Bring a Starting job to Running through the reconciler (this sets the deadline)."""
    with time_machine.travel(now, tick=False):
        for pod in pods:
            apply_worker_state(Pod.objects.get(pk=pod.pk), running=True)
    job.refresh_from_db()


def test_running_sets_the_deadline_and_the_monitor_restarts_a_hung_job(ft_job, node):
    job, pods = ft_job([node], ft=HANG, status=JobStatus.STARTING, pod_status=PodStatus.STARTING)
    _start(job, pods, T0)
    assert job.status == JobStatus.RUNNING and job.hang_deadline == T0 + timedelta(seconds=600)
    GpuDevice.objects.filter(node=node).update(utilization=0)
    with time_machine.travel(T0 + timedelta(seconds=599), tick=False):
        assert run_job_monitor().hung == []
    with time_machine.travel(T0 + timedelta(seconds=601), tick=False):
        assert run_job_monitor().hung == [job.pk]
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.attempt == 2 and job.restart_count == 1
    assert job.status_reason.startswith("restart 1/3: the job made no progress (hang detected)")
    assert re.search(r"its (1 GPU is|\d+ GPUs are) idle", job.status_reason)
    assert job.hang_deadline is None
    assert Pod.objects.get(pk=pods[0].pk).desired == PodDesired.STOP
    record = RestartRecord.objects.get(job=job)
    assert record.kind == "hang" and record.rule == "hang"


def test_two_monitors_act_once(ft_job, node):
    job, _ = ft_job([node], ft=HANG, hang_deadline=T0)
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False):
        first, second = run_job_monitor(), run_job_monitor()
    assert (first.hung, second.hung) == ([job.pk], [])
    assert RestartRecord.objects.count() == 1


def test_a_stale_claim_does_nothing(ft_job, node):
    """The deadline moved (progress arrived) after the monitor read it: its claim fails."""
    from jobs.job_monitor import JobMonitorResult, _act_on_hang

    job, _ = ft_job([node], ft=HANG, hang_deadline=T0 + timedelta(seconds=600))
    result = JobMonitorResult()
    _act_on_hang(job.pk, T0, T0 + timedelta(seconds=1), result)
    assert result.hung == [] and Job.objects.get(pk=job.pk).status == JobStatus.RUNNING


def test_an_error_pushes_the_deadline_forward(ft_job, node, monkeypatch):
    job, _ = ft_job([node], ft=HANG, hang_deadline=T0)

    def boom(*args, **kwargs):
        raise RuntimeError("bad row")

    monkeypatch.setattr("jobs.job_monitor.handle_hang", boom)
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False):
        run_job_monitor()
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    assert job.hang_deadline == T0 + timedelta(seconds=61)


def test_hang_action_stop_ends_stopped(ft_job, node):
    ft = FtConfig(enabled=True, hang_detection=True, hang_timeout=600, hang_action=HangAction.STOP)
    job, (pod,) = ft_job([node], ft=ft, hang_deadline=T0)
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False):
        run_job_monitor()
    job.refresh_from_db()
    assert job.stop_requested_at is not None and job.status == JobStatus.RUNNING
    assert job.stop_reason.startswith("stopped: the job made no progress")
    apply_worker_state(Pod.objects.get(pk=pod.pk), running=False, exit_code=143)
    assert Job.objects.get(pk=job.pk).status == JobStatus.STOPPED


def test_a_hang_past_the_budget_fails_the_job(ft_job, node):
    job, (pod,) = ft_job([node], ft=HANG, hang_deadline=T0, restart_count=3)
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False):
        run_job_monitor()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "restart budget used up" in job.status_reason
    assert Pod.objects.get(pk=pod.pk).desired == PodDesired.STOP


def test_deadlines_of_jobs_that_no_longer_run_are_cleared(ft_job, node):
    job, _ = ft_job([node], ft=HANG, hang_deadline=T0, status=JobStatus.COMPLETED)
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False):
        assert run_job_monitor().cleared == 1
    assert Job.objects.get(pk=job.pk).hang_deadline is None


def test_max_runtime_terminates_at_once(ft_job, node):
    job, (pod,) = ft_job([node], ft=FtConfig(), max_runtime_seconds=120, started_at=T0)
    with time_machine.travel(T0 + timedelta(seconds=119), tick=False):
        assert run_job_monitor().terminated == []
    with time_machine.travel(T0 + timedelta(seconds=121), tick=False):
        assert run_job_monitor().terminated == [job.pk]
        assert run_job_monitor().terminated == []  # already under way
    pod.refresh_from_db()
    assert (pod.desired, pod.stop_as, pod.stop_grace_seconds) == ("Stop", "Terminated", 0)
    apply_worker_state(pod, running=False, exit_code=137)
    job.refresh_from_db()
    assert job.status == JobStatus.TERMINATED
    assert job.status_reason == "max runtime of 120s exceeded"
