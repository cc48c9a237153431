"""Usage history fixtures: a small history of pods across hours, a charge move and a wait."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from jobs.actions.scheduling import apply_plan
from jobs.actions.transitions import transition
from jobs.models import Pod, WorkerGpuSample
from policy.scheduler.model import ChargeHome, Plan
from policy.statuses import Actor, IdleResources, JobStatus, PodStatus
from tests.web.conftest import borrow, place, submit

T0 = datetime(2026, 11, 2, 9, 40, tzinfo=UTC)
MICRO = timedelta(microseconds=1)


def us(delta: timedelta) -> int:
    return delta // MICRO


def end_pods(job, at: datetime, status: PodStatus = PodStatus.SUCCEEDED) -> None:
    Pod.objects.filter(job=job).update(status=status, finished_at=at)
    with time_machine.travel(at, tick=False):
        transition(job, JobStatus.COMPLETED, reason="done", actor=Actor.AGENT, exit_code=0)


@pytest.fixture
def history(researcher, colleague, workspace, quota, other_quota, node):
    """Expected GPU-microseconds per (quota, field) of a history from T0 to T0 + 5h:
    - `trainer` (team-a, 2 workers of 2 GPUs) runs T0+5m → T0+2h30m, idle from T0+1h to T0+1h10m;
    - `borrower` (team-a, Acceptable, 3 GPUs on team-b) from T0+20m, moved home at T0+1h50m,
      still running;
    - `waiter` (team-a, 4 GPUs) waits T0 → T0+3h, then runs one hour."""
    expect: dict[tuple[int, str], int] = {}

    def add(quota_id: int, field: str, amount: int) -> None:
        expect[quota_id, field] = expect.get((quota_id, field), 0) + amount

    with time_machine.travel(T0, tick=False):
        waiter = submit(colleague, workspace, quota, name="waiter", workers=1, gpus_per_worker=4)
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        trainer = submit(researcher, workspace, quota, name="trainer", workers=2, gpus_per_worker=2)
        trainer_pods = place(trainer, node)
    for minute in (60, 61, 62, 65, 70):  # idle from 60 to 70 (two samples each way)
        for pod in trainer_pods:
            WorkerGpuSample.objects.create(
                pod=pod, at=T0 + timedelta(minutes=minute), gpus=2, utilization=0, memory_used_mb=1
            )
    for pod in trainer_pods:
        WorkerGpuSample.objects.create(
            pod=pod, at=T0 + timedelta(minutes=72), gpus=2, utilization=90, memory_used_mb=1
        )
    add(quota.pk, "idle_held", 2 * 2 * us(timedelta(minutes=10)))
    end_pods(trainer, T0 + timedelta(hours=2, minutes=30))
    add(quota.pk, "in_quota", 2 * 2 * us(timedelta(hours=2, minutes=25)))

    with time_machine.travel(T0 + timedelta(minutes=20), tick=False):
        borrower = submit(
            researcher,
            workspace,
            quota,
            name="borrower",
            idle_resources=IdleResources.ACCEPTABLE,
            gpus_per_worker=3,
        )
        borrow(borrower, node, other_quota, [5, 6, 7])
    moved_at = T0 + timedelta(hours=1, minutes=50)
    home = ChargeHome(borrower.pk, quota.pk, (other_quota.pk,), 1, "charge moved home")
    with time_machine.travel(moved_at, tick=False):
        apply_plan(Plan(charges_home=(home,)), {}, moved_at)
    add(quota.pk, "borrowed", 3 * us(timedelta(hours=1, minutes=30)))
    add(other_quota.pk, "lent", 3 * us(timedelta(hours=1, minutes=30)))
    until = T0 + timedelta(hours=5)
    add(quota.pk, "in_quota", 3 * us(until - moved_at))  # still running at `until`

    start = T0 + timedelta(hours=3)
    with time_machine.travel(start, tick=False):
        place(waiter, node)
    end_pods(waiter, start + timedelta(hours=1))
    add(quota.pk, "waiting", 4 * us(start - T0))
    add(quota.pk, "in_quota", 4 * us(timedelta(hours=1)))
    return {"expect": expect, "until": until, "jobs": (trainer, borrower, waiter)}
