"""The cycle runs with the cyclic collector off and turns it back on after
(jobs.scheduler.gcpause): pauses nest and overlap across threads, an error ends the pause
too, and a collector something else turned off stays off."""

import gc
import threading

import pytest

from jobs.scheduler import cycle
from jobs.scheduler.gcpause import collector_paused


@pytest.fixture(autouse=True)
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_off_inside_on_after_even_after_an_error():
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a failed cycle")
    assert gc.isenabled()


def test_overlapping_pauses_of_two_threads_end_with_the_last():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with collector_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second():
        first_in.wait(5)
        with collector_paused():
            second_in.set()
            first_out.wait(5)
            seen["after the first ended"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == {"after the first ended": False}
    assert gc.isenabled()


def test_nested_pauses_and_a_collector_turned_off_elsewhere():
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


@pytest.mark.django_db
def test_a_cycle_reads_and_plans_with_the_collector_off(monkeypatch):
    seen = []
    real_load, real_plan = cycle.load_snapshot, cycle.plan

    def load(*args, **kwargs):
        seen.append(("load", gc.isenabled()))
        return real_load(*args, **kwargs)

    def plan(*args, **kwargs):
        seen.append(("plan", gc.isenabled()))
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(cycle, "load_snapshot", load)
    monkeypatch.setattr(cycle, "plan", plan)
    assert cycle.run_cycle() is not None
    assert seen == [("load", False), ("plan", False)]
    assert gc.isenabled()
