"""Expected-start forecast benchmark: `policy.forecast.forecast()` (a what-if run of plan() as
running jobs end) on the scheduler benchmark's synthetic clusters.

    .venv/bin/python bench/forecast.py                    # small and medium, once
    .venv/bin/python bench/forecast.py --full             # small, medium, large, 3 times
    .venv/bin/python bench/forecast.py --sizes small --repeat 5

Prints, per size, the time of one forecast, how many waiting jobs got an estimate, and the
ratio to one plan() of the same snapshot (the forecast runs at most MAX_EVENTS plans). Pages
reuse one forecast for FORECAST_CACHE_SECONDS, so this is the cost per cache period.
"""

import argparse
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import report  # noqa: E402
from bench.scheduler import NOW, SIZES, synthetic_snapshot  # noqa: E402
from policy.forecast import MAX_EVENTS, Held, forecast  # noqa: E402
from policy.scheduler.plan import plan  # noqa: E402


def held_of(snapshot, rng: random.Random) -> list[Held]:
    """What each running job holds (its node's busy GPUs) and when it ends: within a day."""
    nodes = {n.id: n for n in snapshot.nodes}
    held = []
    for r in snapshot.running:
        pods = []
        for node_id, gpus in r.gpus_by_node:
            node = nodes[node_id]
            busy = [i for i in range(node.gpus) if i not in node.free_gpu_indices][:gpus]
            pods.append((node_id, tuple(busy), 4, 16))
        ends = NOW + timedelta(seconds=rng.randrange(60, 86_400))
        held.append(Held(r.id, f"job #{r.id}", r.charged_quota_id, r.in_quota, tuple(pods),
                         ends, "max runtime"))  # fmt: skip
    return held


def run(size_name: str, repeat: int, seed: int) -> dict:
    size = SIZES[size_name]
    rng = random.Random(seed)
    snapshot = synthetic_snapshot(size, seed=seed, idle_mix=0.2)
    held = held_of(snapshot, rng)
    durations = {
        j.id: (float(rng.randrange(600, 14_400)), "similar past jobs") for j in snapshot.jobs
    }
    plan_times, forecast_times = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan(snapshot, NOW)
        plan_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        estimates = forecast(snapshot, held, durations, NOW)
        forecast_times.append(time.perf_counter() - t0)
    known = sum(1 for e in estimates.values() if e.known)
    p, f = statistics.median(plan_times), statistics.median(forecast_times)
    print(
        f"{size_name:7s} {size.nodes:5d} nodes {len(snapshot.jobs):6d} waiting "
        f"{len(held):5d} running: forecast {f * 1000:8.1f} ms "
        f"({known}/{len(estimates)} estimated), one plan() {p * 1000:7.1f} ms, "
        f"ratio {f / p:5.1f} (at most {MAX_EVENTS} plans)"
    )
    return {
        "size": size_name,
        "nodes": size.nodes,
        "waiting": len(snapshot.jobs),
        "running": len(held),
        "forecast_ms": round(f * 1000, 1),
        "estimated": known,
        "plan_ms": round(p * 1000, 1),
        "ratio_to_plan": round(f / p, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", help="comma-separated (default small,medium; --full adds large)")
    parser.add_argument("--repeat", type=int, help="default 1 (quick), 3 (--full)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--full", action="store_true", help="the suite's full variant")
    args = parser.parse_args(argv)
    sizes = args.sizes or ("small,medium,large" if args.full else "small,medium")
    repeat = args.repeat or (3 if args.full else 1)
    rows = [run(name, repeat, args.seed) for name in sizes.split(",")]
    report("forecast", rows, quick=not args.full, repeat=repeat)


if __name__ == "__main__":
    main()
