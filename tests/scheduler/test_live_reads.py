"""The snapshot's live pods and placed jobs kept between cycles (jobs.scheduler.live and
.running): whatever the product does to pods and jobs between two cycles (new pods, pods
started, charges moved home, workers exiting, stops, rows deleted by hand), the next
incremental snapshot equals one read from scratch. On SQLite every read sums every row: the
same tests hold. A seeded random walk through those writes checks the same after each step."""

import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.actions.stop import request_stop
from jobs.models import Job, Pod
from jobs.scheduler import live
from jobs.scheduler.cycle import load_snapshot, run_cycle
from jobs.scheduler.snapshot import forget
from policy.statuses import ACTIVE_POD_STATUSES, PodStatus
from tests.conftest import make_node
from tests.scheduler.conftest import finish_pods


def _comparable(snapshot):
    return (
        snapshot.nodes,
        snapshot.quotas,
        sorted(snapshot.running, key=lambda r: r.id),
        sorted(snapshot.jobs, key=lambda j: j.id),
    )


def assert_same_as_fresh():
    kept, _ = load_snapshot(incremental=True)
    forget()
    fresh, _ = load_snapshot(incremental=True)
    assert _comparable(kept) == _comparable(fresh)
    whole, _ = load_snapshot()  # a page's read: every row, no memory
    assert _comparable(whole) == _comparable(fresh)
    return kept


def _live_pods():
    return Pod.objects.filter(status__in=list(ACTIVE_POD_STATUSES))


def test_every_kind_of_pod_change_is_seen_by_the_next_snapshot(
    submit, node, quota, other_quota, researcher
):
    jobs = [submit(name=f"j{i}", gpus=2) for i in range(5)]
    run_cycle()  # four placed (8 GPUs), one queued
    load_snapshot(incremental=True)
    snapshot = assert_same_as_fresh()
    assert len(snapshot.running) == 4
    assert snapshot.nodes[0].free_gpu_indices == ()

    # A worker starts (the agent's report): its start time is the job's.
    pod = _live_pods().filter(job=jobs[0]).get()
    started = timezone.now()
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.RUNNING, started_at=started)
    snapshot = assert_same_as_fresh()
    assert {r.id: r.started_at for r in snapshot.running}[jobs[0].id] == started

    # A charge moves to another quota (raw SQL, as the cycle's charge move would).
    table = connection.ops.quote_name(Pod._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET charged_quota_id = %s, in_quota = %s WHERE id = %s",
            [other_quota.id, False, pod.pk],
        )
    snapshot = assert_same_as_fresh()
    used = {q.id: (q.used_gpus, q.borrowed_gpus) for q in snapshot.quotas}
    assert used[other_quota.id] == (2, 2)
    assert used[quota.id] == (6, 0)

    # Workers exit: their GPUs are free, their jobs hold nothing.
    finish_pods(jobs[1])
    snapshot = assert_same_as_fresh()
    assert snapshot.nodes[0].free_gpu_indices
    assert jobs[1].id not in {r.id for r in snapshot.running}

    # A stop: the job's row changes, its pods still hold the GPUs until they exit.
    request_stop(jobs[2], user=researcher)
    snapshot = assert_same_as_fresh()
    assert {r.id: r.stopping for r in snapshot.running}[jobs[2].id] is True

    # The next cycle places the queued job on the freed GPUs (new pods).
    run_cycle()
    snapshot = assert_same_as_fresh()
    assert jobs[4].id in {r.id for r in snapshot.running}

    # A pod row deleted by hand.
    _live_pods().filter(job=jobs[3]).delete()
    snapshot = assert_same_as_fresh()
    assert jobs[3].id not in {r.id for r in snapshot.running}


def test_a_second_read_reads_only_the_pods_that_changed(submit, node):
    jobs = [submit(name=f"j{i}", gpus=1) for i in range(6)]
    run_cycle()
    load_snapshot(incremental=True)
    pod = Pod.objects.get(job=jobs[3])
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.RUNNING, started_at=timezone.now())
    with CaptureQueriesContext(connection) as queries:
        snapshot, _ = load_snapshot(incremental=True)
    assert {r.id for r in snapshot.running} == {j.id for j in jobs}
    pod_rows = [q["sql"] for q in queries.captured_queries if '"gpu_indices"' in q["sql"]]
    [read] = pod_rows
    by_id = f'"jobs_pod"."id" IN ({pod.pk})'
    if connection.vendor == "postgresql":
        assert by_id in read  # after the keys of all six: the one that changed
    else:
        assert '"jobs_pod"."id" IN' not in read  # every live pod, as before


def test_a_read_that_fails_starts_again_from_the_database(submit, node, monkeypatch):
    submit(name="a", gpus=4)
    run_cycle()
    load_snapshot(incremental=True)
    b = submit(name="b", gpus=4)
    run_cycle()

    def broken(rows):
        raise RuntimeError("lost connection")

    monkeypatch.setattr(live, "_decode", broken)
    with pytest.raises(RuntimeError):
        load_snapshot(incremental=True)
    monkeypatch.undo()
    snapshot = assert_same_as_fresh()
    assert b.id in {r.id for r in snapshot.running}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_writes_between_cycles_never_make_the_kept_sums_differ(
    seed, submit, quota, other_quota, researcher
):
    """A bounded random walk (40 steps a seed) through what the product writes between two
    cycles; after each step the incremental snapshot equals a fresh one, and no GPU is held
    twice."""
    rng = random.Random(seed)
    for i in range(3):
        make_node(f"walk-{i}", gpus=8)
    for step in range(40):
        live_pods = list(_live_pods())
        placed = list(Job.objects.filter(pods__in=live_pods).distinct())
        action = rng.choice(["submit", "cycle", "start", "exit", "stop", "move", "cycle"])
        if action == "submit":
            for _ in range(rng.randint(1, 3)):
                target = rng.choice([quota, other_quota])
                submit(name=f"s{step}", gpus=rng.choice([1, 2, 4]), target=target,
                       workers=rng.choice([1, 1, 2]))  # fmt: skip
        elif action == "cycle":
            run_cycle()
        elif action == "start" and live_pods:
            pod = rng.choice(live_pods)
            now = timezone.now()
            Pod.objects.filter(pk=pod.pk).update(status=PodStatus.RUNNING, started_at=now)
        elif action == "exit" and placed:
            finish_pods(rng.choice(placed), rng.choice([PodStatus.SUCCEEDED, PodStatus.FAILED]))
        elif action == "stop" and placed:
            request_stop(rng.choice(placed), user=researcher)
        elif action == "move" and live_pods:
            pod = rng.choice(live_pods)
            other = other_quota if pod.charged_quota_id == quota.id else quota
            Pod.objects.filter(pk=pod.pk).update(charged_quota=other, in_quota=not pod.in_quota)
        snapshot = assert_same_as_fresh()
        busy = [
            (r_node, i)
            for r_node, indices in _live_pods().values_list("node_id", "gpu_indices")
            for i in indices
        ]
        assert len(busy) == len(set(busy))
        free = sum(len(n.free_gpu_indices) for n in snapshot.nodes)
        assert free == 24 - len(busy)
