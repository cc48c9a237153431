"""Kueue's scheduler baseline on the policy alone: the same workload as bench/kueue.py (its
classes, quotas, arrivals and nodes), run by the simulator (`simulator.engine`, the real
`plan()` with a simulated clock, a cycle after every event), so it measures what the policy
decides with no product latency at all. bench/kueue.py runs the same through the product.

    .venv/bin/python -m bench.kueue_sim            # quick: 1 tenant x 3 quotas (1,500 jobs)
    .venv/bin/python -m bench.kueue_sim --full     # 5 tenants x 6 quotas (15,000 jobs)
    .venv/bin/python -m bench.kueue_sim --reserve-after 600   # the starvation rule's wait

Figures as bench/kueue.py reports them: time to admission (submit → first pod) per class,
its mean against Kueue's; quota usage = GPU-seconds charged to the quota over the run (first
arrival to last finish) / (20 x that span), the minimum over the quotas, and by Kueue's
formula (all quotas together; with no start delay a pod's reservation is its run); the run's
length.
The work alone takes 66 s (per quota 1,320 GPU-seconds on 20 GPUs); the arrivals span 60 s.
"""

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.kueue import CLASSES, NODE_GPUS, QUOTA_GPUS, QUOTAS_PER_TENANT  # noqa: E402


def scenario(tenants: int, per_tenant: int, settings: dict) -> dict:
    """The baseline as a simulator scenario (docs/simulator.md), mapped as bench/kueue.py maps
    it: Lingjun tenants as cohorts, LowerPriority preemption, every job Acceptable with
    Automatic Fault Tolerance (a preempted job is requeued, as Kueue requeues it)."""
    names = [f"c{t}-q{q}" for t in range(tenants) for q in range(per_tenant)]
    total = tenants * per_tenant * QUOTA_GPUS
    jobs = []
    for name in names:
        for k in CLASSES:
            for i in range(k.count):
                jobs.append(
                    {
                        "name": f"{name}-{k.name}-{i}",
                        "submit_at": round(i * k.interval, 3),
                        "quota": name,
                        "workers": k.workers,
                        "gpus_per_worker": k.gpus_per_worker,
                        "work": k.seconds,
                        "priority": k.priority,
                        "idle_resources": "Acceptable",
                        "fault_tolerance": {"max_restarts": 100},
                    }
                )
    return {
        "settings": settings,
        "tenants": [f"cohort-{t}" for t in range(tenants)],
        "nodes": [
            {
                "name": "kq",
                "count": total // NODE_GPUS,
                "resource_type": "Lingjun",
                "gpu_type": "H200",
                "gpus": NODE_GPUS,
            }
        ],
        "quotas": [
            {
                "name": name,
                "tenant": f"cohort-{int(name[1:].split('-')[0])}",
                "resource_type": "Lingjun",
                "gpu_type": "H200",
                "gpus": QUOTA_GPUS,
                "preemption": "LowerPriority",
            }
            for name in names
        ],
        "jobs": jobs,
    }


def measure(tenants: int, per_tenant: int, settings: dict) -> dict:
    from simulator.engine import Simulation
    from simulator.scenario import parse

    raw = scenario(tenants, per_tenant, settings)
    started = time.perf_counter()
    sim = Simulation(parse(raw), keep_events=False)
    summary = sim.run()
    wall = time.perf_counter() - started
    by_class: dict[str, list[float]] = defaultdict(list)
    last_finish = 0.0
    for name, job in summary["jobs"].items():
        klass = name.split("-")[2]
        if job["first_running_at"] is not None:
            by_class[klass].append(job["first_running_at"] - job["submitted_at"])
        last_finish = max(last_finish, job["finished_at"] or 0.0)
    rows = []
    for k in CLASSES:
        waits = by_class[k.name]
        rows.append(
            {
                "class": k.name,
                "jobs": k.count * tenants * per_tenant,
                "admitted": len(waits),
                "mean_admission_s": round(sum(waits) / len(waits), 2) if waits else None,
                "p95_admission_s": round(common.percentile(waits, 95), 2) if waits else None,
                "kueue_mean_s": k.kueue_mean_admission,
            }
        )
    span = last_finish  # arrivals start at 0
    usage = {
        name: (row["gpu_seconds_in_quota"] + row["gpu_seconds_lent"]) / (QUOTA_GPUS * span)
        for name, row in summary["quotas"].items()
    }
    return {
        "bench": "kueue_sim",
        "tenants": tenants,
        "quotas_per_tenant": per_tenant,
        "settings": settings,
        "rows": rows,
        "total_seconds": round(span, 2),
        "min_quota_usage": round(min(usage.values()), 4),
        # Kueue's formula (bench/kueue.py): all quotas' reserved GPU-seconds together.
        "kueue_usage": round(sum(usage.values()) / len(usage), 4),
        "preemptions": summary["preemptions"],
        "statuses": dict(_count(j["status"] for j in summary["jobs"].values())),
        "invariant_violations": summary["invariant_violations"][:3],
        "wall_seconds": round(wall, 2),
        "targets": {"total_seconds": 75, "kueue_total_seconds": 351, "min_quota_usage": 0.587},
    }


def _count(values) -> dict:
    out: dict = defaultdict(int)
    for v in values:
        out[v] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="5 tenants x 6 quotas, 15,000 jobs")
    parser.add_argument("--reserve-after", type=float, help="the starvation rule's wait (s)")
    parser.add_argument(
        "--min-runtime",
        type=float,
        default=300,
        help="min_runtime_before_reclaim (s); the product's default is 300",
    )
    args = parser.parse_args(argv)
    settings = {"start_delay": 0, "stop_grace": 0, "min_runtime_before_reclaim": args.min_runtime}
    if args.reserve_after is not None:
        settings["reserve_after"] = args.reserve_after
    tenants, per_tenant = (5, QUOTAS_PER_TENANT) if args.full else (1, 3)
    result = measure(tenants, per_tenant, settings)
    rows = result.pop("rows")
    print(
        f"  all final at {result['total_seconds']} s simulated (target <= 75; Kueue 351); "
        f"usage by Kueue's formula {100 * result['kueue_usage']:.1f} % (Kueue 58.7 %), "
        f"min quota usage {100 * result['min_quota_usage']:.1f} %; "
        f"{result['preemptions']} preemptions; {result['wall_seconds']} s wall"
    )
    result.pop("bench")
    common.report("kueue_sim", rows, quick=not args.full, **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
