"""The idle-GPU checker of the liveness property (simulator.idle), on small states."""

from dataclasses import replace

from simulator.engine import Simulation
from simulator.idle import fitting_waiters
from simulator.scenario import parse


def state(jobs, actions=(), quota_gpus=12, **settings) -> Simulation:
    raw = {
        "settings": settings,
        "tenants": ["acme"],
        "nodes": [{"name": "n", "count": 2, "resource_type": "Lingjun", "gpu_type": "H200",
                   "gpus": 8}],
        "quotas": [{"name": "q0", "tenant": "acme", "resource_type": "Lingjun",
                    "gpu_type": "H200", "gpus": quota_gpus}],
        "jobs": [{"submit_at": 0, "quota": "q0", "work": 10} | j for j in jobs],
        "actions": list(actions),
    }  # fmt: skip
    sim = Simulation(parse(raw), until=0)
    sim.run()
    return sim


GANG = {"name": "gang", "workers": 3, "gpus_per_worker": 4}
SMALL = {"name": "small", "workers": 1, "gpus_per_worker": 1,
         "idle_resources": "Only Idle Resources"}  # fmt: skip


def test_a_small_job_kept_waiting_beside_idle_gpus_fits():
    # Without backfill (an option plan() has, the product never turns off), the small job
    # waits behind the gang although node n-1's GPUs are idle: the checker must see it.
    jobs = [{"name": "r", "workers": 1, "gpus_per_worker": 8, "work": 1000},
            {"name": "gang", "workers": 2, "gpus_per_worker": 8},
            {"name": "small", "workers": 1, "gpus_per_worker": 1}]  # fmt: skip
    raw = {
        "tenants": ["acme"],
        "nodes": [{"name": "n", "count": 2, "resource_type": "Lingjun", "gpu_type": "H200",
                   "gpus": 8}],
        "quotas": [{"name": "q0", "tenant": "acme", "resource_type": "Lingjun",
                    "gpu_type": "H200", "gpus": 32}],
        "jobs": [{"submit_at": 0, "quota": "q0", "work": 10} | j for j in jobs],
    }  # fmt: skip
    sim = Simulation(parse(raw), until=0)
    sim.options = replace(sim.options, backfill=False)
    sim.run()
    assert sim.jobs["small"].status == "Inqueue"
    assert fitting_waiters(sim) == {"small": "in quota q0"}


def test_a_borrower_is_not_kept_beside_idle_gpus_for_a_job_that_can_never_be_placed():
    # The lender's own gang (3x4) could never be placed while n-0 is cordoned: it keeps
    # nothing for it, so the borrower starts at once (the property found it waiting).
    sim = state([GANG, SMALL], actions=[{"at": 0, "cordon": "n-0"}], reserve_after=600)
    assert sim.jobs["small"].status != "Inqueue"
    assert fitting_waiters(sim) == {}


def test_gpus_of_a_cordoned_or_lost_node_are_not_idle_capacity():
    # Both nodes out: nothing fits, though the quota has room.
    actions = [{"at": 0, "cordon": "n-0"}, {"at": 0, "node_down": "n-1"}]
    assert fitting_waiters(state([GANG, SMALL], actions=actions)) == {}


def test_a_long_waiter_of_the_pool_excuses_others_while_it_may_hold():
    # gang (2x8) waits for a running 1x8 job; it has waited reserve_after (0 s) and can be
    # hosted once the pool drains: the starvation hold may keep n-1's free GPUs for it.
    jobs = [{"name": "r", "workers": 1, "gpus_per_worker": 8, "work": 1000},
            {"name": "gang", "workers": 2, "gpus_per_worker": 8},
            {"name": "one", "workers": 1, "gpus_per_worker": 4, "submit_at": 0}]  # fmt: skip
    sim = state(jobs, quota_gpus=32, reserve_after=0)
    assert sim.jobs["one"].status == "Inqueue"  # held back by the reservation
    assert fitting_waiters(sim) == {}


def test_cpu_only_jobs_leave_no_gpu_idle():
    cpu = {"name": "cpu", "workers": 1, "gpus_per_worker": 0}
    sim = state([cpu], actions=[{"at": 0, "cordon": "n-0"}, {"at": 0, "cordon": "n-1"}])
    assert sim.jobs["cpu"].status == "Inqueue"
    assert fitting_waiters(sim) == {}
