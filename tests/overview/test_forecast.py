"""Expected start (jobs.forecast): a what-if run of plan() as running jobs end. No database."""

from datetime import timedelta

from jobs.forecast import Held, forecast, median_durations, run_length, running_end
from policy.scheduler.plan import PlanOptions
from tests.scheduler.snaps import T0, job, node, quota, running, snapshot


def held(job_id, node_id, indices, *, ends_in=None, basis="max runtime", quota_id=1):
    ends = None if ends_in is None else T0 + timedelta(minutes=ends_in)
    return Held(
        job_id, f"job #{job_id}", quota_id, True, ((node_id, tuple(indices), 4, 16),), ends, basis
    )


def test_a_job_that_fits_starts_at_the_next_cycle():
    snap = snapshot(nodes=[node(1)], jobs=[job(1, gpus=2)])
    estimate = forecast(snap, [], {}, T0)[1]
    assert estimate.at == T0 and "next scheduling cycle" in estimate.basis


def test_a_queued_job_starts_when_the_running_job_ends():
    snap = snapshot(
        nodes=[node(1, gpus=8, free=())],
        quotas=[quota(1, gpus=8, used=8)],
        running=[running(9, on={1: 8}, in_quota=True)],
        jobs=[job(1, gpus=8), job(2, gpus=8, at=1)],
    )
    estimates = forecast(
        snap,
        [held(9, 1, range(8), ends_in=30)],
        {1: (600.0, "max runtime"), 2: (600.0, "max runtime")},
        T0,
    )
    assert estimates[1].at == T0 + timedelta(minutes=30)
    assert "job #9 ends (max runtime)" in estimates[1].basis
    # The second waits for the first one's own (estimated) run of 10 minutes.
    assert estimates[2].at == T0 + timedelta(minutes=40)
    assert "job #1 ends" in estimates[2].basis


def test_no_estimate_when_the_blocking_job_has_no_known_end():
    snap = snapshot(
        nodes=[node(1, gpus=8, free=())],
        quotas=[quota(1, gpus=8, used=8)],
        running=[running(9, on={1: 8}, in_quota=True)],
        jobs=[job(1, gpus=8)],
    )
    estimate = forecast(snap, [held(9, 1, range(8), ends_in=None)], {}, T0)[1]
    assert estimate.at is None and "job #9" in estimate.basis and "no max runtime" in estimate.basis


def test_the_what_if_stops_after_max_events():
    # Ten 1-GPU jobs in a row on a 1-GPU node, each running 1 minute: with 3 events only the
    # first three get a time.
    snap = snapshot(
        nodes=[node(1, gpus=1, free=())],
        quotas=[quota(1, gpus=1, used=1)],
        running=[running(99, on={1: 1}, in_quota=True)],
        jobs=[job(i, at=i) for i in range(1, 11)],
    )
    durations = {i: (60.0, "similar past jobs") for i in range(1, 11)}
    estimates = forecast(snap, [held(99, 1, [0], ends_in=1)], durations, T0, max_events=3)
    known = sorted(j for j, e in estimates.items() if e.known)
    assert known == [1, 2] and not estimates[10].known and len(estimates) == 10


def test_running_end_prefers_the_earliest_reasonable_bound():
    now = T0 + timedelta(minutes=10)
    assert running_end(
        now=now, started_at=T0, max_runtime=3600, progress=(None, None, None), past=None
    ) == (T0 + timedelta(hours=1), "max runtime")
    # 500 steps left at 10 steps/s: 50 s, sooner than the max runtime.
    assert running_end(
        now=now, started_at=T0, max_runtime=3600, progress=(500, 1000, 10.0), past=None
    ) == (now + timedelta(seconds=50), "progress")
    assert running_end(
        now=now, started_at=T0, max_runtime=None, progress=(None, None, None), past=1200.0
    ) == (T0 + timedelta(minutes=20), "similar past jobs")
    assert running_end(
        now=now, started_at=T0, max_runtime=None, progress=(None, None, None), past=None
    ) == (None, "")


def test_durations_from_similar_past_jobs():
    rows = [(1, "train", T0, T0 + timedelta(minutes=m)) for m in (10, 30, 20)]
    rows.append((2, "train", T0, T0 + timedelta(minutes=99)))
    medians = median_durations(rows)
    assert medians[(1, "train")] == 1200.0 and medians[(2, "train")] == 99 * 60
    assert run_length(None, 1200.0) == (1200.0, "similar past jobs")
    assert run_length(600, 1200.0) == (600.0, "max runtime")
    assert run_length(None, None) is None


def test_targets_limit_the_what_if_to_their_pools_and_stop_early():
    from tests.scheduler.snaps import GENERAL

    snap = snapshot(
        nodes=[
            node(1, gpus=1, free=()),
            node(2, gpus=1, free=(), gpu_type="A100", resource_type=GENERAL),
        ],
        quotas=[
            quota(1, gpus=1, used=1),
            quota(2, name="gp", gpus=1, used=1, gpu_type="A100", resource_type=GENERAL),
        ],
        running=[
            running(98, on={1: 1}, in_quota=True),
            running(99, on={2: 1}, quota=2, in_quota=True),
        ],
        jobs=[job(1), job(2, at=1), job(3, quota=2)],
    )
    helds = [held(98, 1, [0], ends_in=10), held(99, 2, [0], ends_in=5, quota_id=2)]
    durations = {1: (60.0, "similar past jobs"), 2: (60.0, "similar past jobs")}
    estimates = forecast(snap, helds, durations, T0, targets={1})
    # Only job 1's pool was simulated, and only until job 1 had a time.
    assert set(estimates) == {1, 2} and estimates[1].at == T0 + timedelta(minutes=10)
    assert not estimates[2].known


def _borrowed_node(*, borrower_ends_in):
    """Quota 1 (8 GPUs, the lender) waits for 8 GPUs that job 15 of quota 2 borrowed 2
    minutes ago; job 15 may be reclaimed once it has run 5 minutes (min runtime)."""
    snap = snapshot(
        nodes=[node(1, gpus=8, free=())],
        quotas=[quota(1, gpus=8, used=8, borrowed_gpus=8), quota(2, name="team-b", gpus=0)],
        running=[running(15, on={1: 8}, quota=2, charged=1, in_quota=False, started=-2)],
        jobs=[job(1, gpus=8)],
    )
    ends = None if borrower_ends_in is None else T0 + timedelta(minutes=borrower_ends_in)
    borrower = Held(15, "job #15", 1, False, ((1, tuple(range(8)), 4, 16),), ends, "max runtime")
    return snap, [borrower]


def test_a_job_behind_a_borrower_starts_when_the_reclaim_is_allowed_not_when_it_ends():
    snap, helds = _borrowed_node(borrower_ends_in=30)
    options = PlanOptions(min_runtime_before_reclaim_s=300)
    estimate = forecast(snap, helds, {1: (600.0, "max runtime")}, T0, options)[1]
    # Reclaimed at T0+3 min (5 minutes after it started), its workers stop within the grace.
    assert T0 + timedelta(minutes=3) <= estimate.at <= T0 + timedelta(minutes=4), estimate
    assert "job #15" in estimate.basis and "reclaimed" in estimate.basis


def test_a_borrower_without_a_known_end_still_gives_way_at_its_reclaim_time():
    snap, helds = _borrowed_node(borrower_ends_in=None)
    options = PlanOptions(min_runtime_before_reclaim_s=300)
    estimate = forecast(snap, helds, {}, T0, options)[1]
    assert estimate.known, estimate.basis
    assert T0 + timedelta(minutes=3) <= estimate.at <= T0 + timedelta(minutes=4)
