"""The GPU-time account `bench/kueue.py` prints (bench.gputime): its parts add up to the
capacity, and each lands where the definitions say."""

from datetime import UTC, datetime, timedelta

from bench.gputime import JobWait, PodSpan, account, describe

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_parts_add_up_and_land_where_they_belong():
    """4 GPUs over 10 s (40 GPU-s). A job of 2 GPUs waits from 0 to 2 s while all 4 are free
    (2 x 2 = 4 GPU-s free while waiting); its pod holds 2 GPUs from 2 to 8 s and worked 5 s
    (12 held, 10 work, 2 overhead). A preempted pod holds 1 GPU from 1 to 3 s, its work lost
    (2 overhead, no wait: its job was created as it was placed). The rest is free with
    nothing waiting: 40 - 14 - 4 = 22."""
    pods = [PodSpan(2, at(2), at(8), 5.0), PodSpan(1, at(1), at(3), 0.0)]
    waits = [JobWait(2, at(0), at(2)), JobWait(1, at(1), at(1))]
    figures = account(pods, waits, gpus=4, start=T0, end=at(10))
    assert figures["capacity_gpu_s"] == 40
    assert figures["work_gpu_s"] == 10
    assert figures["held_overhead_gpu_s"] == 4
    assert figures["free_while_waiting_gpu_s"] == 4
    assert figures["free_nothing_waiting_gpu_s"] == 22
    assert figures["work_run_s"] == 2.5 and figures["work_share"] == 0.25
    assert "work 25.0 % (2.5 s)" in describe(figures)


def test_free_while_waiting_is_bounded_by_the_free_gpus_and_by_the_demand():
    """3 of 4 GPUs held from 0 to 10 s; a job of 2 GPUs waits the whole run: only 1 GPU is
    free, so 10 GPU-s free while waiting, not 20. Then a job of 1 GPU waits on 4 free
    GPUs: 1 GPU-s per second, not 4."""
    held = account([PodSpan(3, at(0), at(10), 10.0)], [JobWait(2, at(0), None)], 4, T0, at(10))
    assert held["free_while_waiting_gpu_s"] == 10
    small = account([], [JobWait(1, at(0), at(5))], 4, T0, at(10))
    assert small["free_while_waiting_gpu_s"] == 5
    assert small["free_nothing_waiting_gpu_s"] == 35
