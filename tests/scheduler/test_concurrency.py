"""Concurrent cycles and stops on a real database (threads, separate connections).

The cycle's lock is the advisory lock on PostgreSQL and a process lock plus IMMEDIATE
transactions on SQLite; both are exercised here. Triggers are switched to `inprocess` with no
loop running, so a commit wakes nothing and each test controls exactly which cycles run.
"""

import threading
import time
from collections import Counter

import pytest
from django.conf import settings as django_settings
from django.db import IntegrityError, connection, connections, transaction
from django.db.models import Sum

import jobs.scheduler.cycle as cycle_module
from jobs.actions.stop import request_stop
from jobs.models import HeldGpu, Job, JobEvent, Pod, PodDesired
from jobs.scheduler.cycle import run_cycle
from policy.statuses import ACTIVE_POD_STATUSES, JobStatus
from quotas.models import Quota
from tests.conftest import make_node
from tests.scheduler.seams import after_plan
from tests.scheduler.threads import run_together

pytestmark = pytest.mark.django_db(transaction=True)
LIVE = [s.value for s in ACTIVE_POD_STATUSES]


@pytest.fixture(autouse=True)
def no_automatic_cycles(settings):
    settings.CONSOLE_LOOPS = "inprocess"


def waiting_job(quota, owner, workspace, gpus: int, status=JobStatus.PENDING, name="j") -> Job:
    return Job.objects.create(
        workspace=workspace,
        quota=quota,
        owner=owner,
        name=name,
        image="pytorch:2",
        command="python train.py",
        gpus_per_worker=gpus,
        status=status,
    )


def assert_nothing_double_booked() -> None:
    for node_id in set(Pod.objects.filter(status__in=LIVE).values_list("node_id", flat=True)):
        held = Counter()
        for indices in Pod.objects.filter(node_id=node_id, status__in=LIVE).values_list(
            "gpu_indices", flat=True
        ):
            held.update(indices)
        assert all(n == 1 for n in held.values()), f"node {node_id}: {held}"
    for q in Quota.objects.all():
        used = Pod.objects.filter(charged_quota=q, status__in=LIVE).aggregate(s=Sum("gpus"))["s"]
        assert (used or 0) <= q.gpus, f"quota {q.name} over its size: {used}/{q.gpus}"


def test_two_cycles_at_once_admit_each_job_once(
    quota, other_quota, researcher, outsider, workspace, other_workspace
):
    """Both cycles start from the same committed state: the row check alone would keep this
    correct (the second cycle finds the jobs moved), so this does not test the lock: see
    `test_a_cycle_paused_after_plan_holds_the_lock_against_another`."""
    make_node("node-0")
    make_node("node-1")
    Quota.objects.filter(pk=quota.pk).update(gpus=12)  # room for 3 of team-a's 4 jobs
    for round_ in range(3):
        Pod.objects.all().delete()
        Job.objects.all().delete()
        for i in range(4):
            waiting_job(quota, researcher, workspace, gpus=4, name=f"a{round_}-{i}")
        for i in range(3):
            waiting_job(other_quota, outsider, other_workspace, gpus=4, name=f"b{round_}-{i}")

        results = run_together(run_cycle, run_cycle)

        assert [kind for kind, _ in results] == ["ok", "ok"], results
        first, second = (value.admitted for _, value in results)
        assert not set(first) & set(second), "a job was admitted twice"
        starting = set(Job.objects.filter(status=JobStatus.STARTING).values_list("id", flat=True))
        assert starting == set(first) | set(second)
        # 16 GPUs on two nodes, 4 per job: exactly 4 jobs fit, each within its quota.
        assert len(starting) == 4
        assert_nothing_double_booked()
        for job_id in starting:
            assert Pod.objects.filter(job_id=job_id).count() == 1
            assert JobEvent.objects.filter(job_id=job_id, to_status=JobStatus.STARTING).count() == 1


def test_stop_racing_a_cycle_leaves_one_winner(quota, researcher, workspace):
    make_node("node-0")
    for round_ in range(10):
        Pod.objects.all().delete()
        Job.objects.all().delete()
        job = waiting_job(quota, researcher, workspace, 4, JobStatus.INQUEUE, f"r{round_}")

        results = run_together(run_cycle, lambda j=job: request_stop(j, user=researcher))

        assert [kind for kind, _ in results] == ["ok", "ok"], results
        job.refresh_from_db()
        moves = list(
            JobEvent.objects.filter(job=job, from_status=JobStatus.INQUEUE).values_list(
                "to_status", flat=True
            )
        )
        assert len(moves) == 1, moves
        if moves == [JobStatus.STOPPED]:  # the stop won: the cycle must not have placed it
            assert job.status == JobStatus.STOPPED
            assert not job.pods.exists()
        else:  # admission won: the stop became a graceful stop of the placed workers
            assert job.status == JobStatus.STARTING
            assert job.stop_requested_at is not None
            assert list(job.pods.values_list("desired", flat=True)) == [PodDesired.STOP]


@pytest.mark.postgres
@pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL")
def test_stop_committed_while_the_cycle_plans_wins(quota, researcher, workspace, monkeypatch):
    """Deterministic interleaving: the user's stop commits after the cycle's snapshot and
    before its writes. (On SQLite the cycle's write lock makes this order impossible.)"""
    make_node("node-0")
    job = waiting_job(quota, researcher, workspace, 4, JobStatus.INQUEUE)
    planned, stopped = threading.Event(), threading.Event()
    real_plan = cycle_module.plan

    def plan_and_wait(snapshot, now, *options):
        decided = real_plan(snapshot, now, *options)
        planned.set()
        assert stopped.wait(10), "the stop never happened"
        return decided

    def stop_while_planning():
        assert planned.wait(10)
        try:
            return request_stop(Job.objects.get(pk=job.pk), user=researcher)
        finally:
            stopped.set()

    monkeypatch.setattr(cycle_module, "plan", plan_and_wait)
    (kind1, result), (kind2, _) = run_together(run_cycle, stop_while_planning)

    assert (kind1, kind2) == ("ok", "ok")
    assert result.conflicts == (job.id,)
    assert result.admitted == ()
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    assert not Pod.objects.exists()


def test_two_cycles_at_once_borrow_and_reclaim_without_double_booking(
    quota, other_quota, researcher, outsider, workspace, other_workspace, settings
):
    from jobs.actions.workers import apply_worker_state
    from policy.statuses import IdleResources

    settings.SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM = 0  # reclaim at once (default: 300 s)

    make_node("node-0")
    make_node("node-1")
    Quota.objects.filter(pk=other_quota.pk).update(gpus=0)  # team-b only borrows
    for round_ in range(3):
        Pod.objects.all().delete()
        Job.objects.all().delete()
        borrowers = []
        for i in range(4):  # 32 GPUs of idle work for team-a's 16 lendable GPUs
            j = waiting_job(other_quota, outsider, other_workspace, 8, name=f"b{round_}-{i}")
            Job.objects.filter(pk=j.pk).update(idle_resources=IdleResources.ONLY)
            borrowers.append(j)

        results = run_together(run_cycle, run_cycle)
        assert [kind for kind, _ in results] == ["ok", "ok"], results
        assert_nothing_double_booked()
        placed = list(Job.objects.filter(status=JobStatus.STARTING))
        assert len(placed) == 2
        assert set(Pod.objects.values_list("charged_quota_id", "in_quota")) == {(quota.id, False)}
        for pod in Pod.objects.all():
            apply_worker_state(pod, running=True)

        owners = [
            waiting_job(quota, researcher, workspace, 8, name=f"a{round_}-{i}") for i in (0, 1)
        ]
        results = run_together(run_cycle, run_cycle)
        assert [kind for kind, _ in results] == ["ok", "ok"], results
        preempted = [job_id for _, r in results for job_id in r.preempted]
        assert sorted(preempted) == sorted(j.id for j in placed), "each victim exactly once"
        assert not Pod.objects.filter(job__in=owners).exists()  # they wait for the release

        for pod in Pod.objects.filter(status__in=LIVE):
            apply_worker_state(pod, running=False, exit_code=143)
        results = run_together(run_cycle, run_cycle)
        assert [kind for kind, _ in results] == ["ok", "ok"], results
        assert_nothing_double_booked()
        assert set(
            Job.objects.filter(pk__in=[j.id for j in placed]).values_list("status", flat=True)
        ) == {JobStatus.PREEMPTED}
        admitted = sorted(job_id for _, r in results for job_id in r.admitted)
        assert admitted == sorted(j.id for j in owners)
        assert set(Pod.objects.filter(status__in=LIVE).values_list("in_quota", flat=True)) == {True}


def _waiting_on_a_lock(kind: str) -> bool:
    """Whether some other session waits for a lock of this kind (pg_locks.locktype)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = %s AND NOT granted", [kind])
        return cursor.fetchone()[0] > 0


def _until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.postgres
@pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL")
def test_a_cycle_paused_after_plan_holds_the_lock_against_another(
    quota, other_quota, researcher, outsider, workspace, other_workspace, monkeypatch
):
    """Cycle 1 plans job A onto the node's 8 GPUs and pauses before writing. Meanwhile a
    higher-priority job B of another quota is committed and cycle 2 runs: it must not plan
    until cycle 1 has committed (it waits on the advisory lock), so it sees A's pods and B
    waits. Without the lock cycle 2 would place B on the same GPUs, which no row check
    catches (A and B are different rows): two jobs on one GPU, or, with the GPU constraint,
    cycle 1 failing."""
    make_node("node-0")
    # Already Inqueue: cycle 2 only refreshes its reason, so its row stays as cycle 1 saw it.
    job_a = waiting_job(quota, researcher, workspace, 8, JobStatus.INQUEUE, name="a")
    paused, resume = threading.Event(), threading.Event()
    first_cycle: list[threading.Thread] = []

    def hold_the_first_cycle(decided):
        if first_cycle and threading.current_thread() is first_cycle[0]:
            assert [a.job_id for a in decided.admissions] == [job_a.id]
            paused.set()
            assert resume.wait(20), "the test never resumed the first cycle"

    after_plan(monkeypatch, hold_the_first_cycle)
    results: dict[str, tuple[str, object]] = {}

    def run(name: str, call) -> None:
        try:
            results[name] = ("ok", call())
        except Exception as exc:
            results[name] = ("error", exc)
        finally:
            connections.close_all()

    cycle1 = threading.Thread(target=run, args=("cycle1", run_cycle))
    first_cycle.append(cycle1)
    cycle1.start()
    try:
        assert paused.wait(20), "the first cycle never planned"
        job_b = waiting_job(other_quota, outsider, other_workspace, 8, name="b")
        Job.objects.filter(pk=job_b.pk).update(priority=10)  # B comes first in any plan
        cycle2 = threading.Thread(target=run, args=("cycle2", run_cycle))
        cycle2.start()
        # With the lock, cycle 2 is seen waiting on it; without, it runs to its end.
        blocked = _until(lambda: _waiting_on_a_lock("advisory") or not cycle2.is_alive())
    finally:
        resume.set()
        cycle1.join(30)
    cycle2.join(30)

    assert blocked
    assert results["cycle1"][0] == "ok", results
    assert results["cycle2"][0] == "ok", results
    assert results["cycle1"][1].admitted == (job_a.id,)
    assert results["cycle2"][1].admitted == ()
    assert_nothing_double_booked()
    assert Job.objects.get(pk=job_b.pk).status == JobStatus.INQUEUE
    assert HeldGpu.objects.filter(pod__job=job_a).count() == 8


@pytest.mark.postgres
@pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL")
def test_concurrent_writers_cannot_both_hold_a_gpu(quota, researcher, workspace):
    """Two transactions put a live pod on the same GPU outside any lock: the second waits on
    the first's uncommitted hold and is refused once it commits (the database's rule)."""
    node = make_node("node-0")
    first_job = waiting_job(quota, researcher, workspace, 1, name="first")
    second_job = waiting_job(quota, researcher, workspace, 1, name="second")
    inserted, release = threading.Event(), threading.Event()

    def place(job) -> Pod:
        return Pod.objects.create(
            job=job, attempt=1, rank=0, node=node, gpu_indices=[3], gpus=1, charged_quota=quota
        )

    def first():
        with transaction.atomic():
            pod = place(first_job)
            inserted.set()
            assert release.wait(20)
        return pod

    def second():
        assert inserted.wait(20)
        with transaction.atomic():
            return place(second_job)

    def referee():
        assert inserted.wait(20)
        try:  # the second writer is seen waiting on the first's transaction
            return _until(lambda: _waiting_on_a_lock("transactionid"))
        finally:
            release.set()

    (k1, pod), (k2, refused), (k3, waited) = run_together(first, second, referee)

    assert (k1, k3, waited) == ("ok", "ok", True)
    assert k2 == "error" and isinstance(refused, IntegrityError), refused
    assert list(Pod.objects.values_list("job_id", flat=True)) == [first_job.id]
    assert list(HeldGpu.objects.values_list("pod_id", "gpu_index")) == [(pod.id, 3)]
