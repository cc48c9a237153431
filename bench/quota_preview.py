"""The owner pages' what-if (docs/quota-tree.md "Owner pages"): `policy.quota_preview.preview`
of a resize on 2,000 nodes with 10,000 waiting jobs (target <= 1 s), pure: two `plan()`s of
the edited quota's pool and their diff.

    .venv/bin/python -m bench.quota_preview            # quick: medium, one pool and three
    .venv/bin/python -m bench.quota_preview --full     # also large (5,000 nodes, 50,000 jobs)

Two shapes of the synthetic cluster (bench/synthetic.py, with 3-level quota trees): as
generated (three pools: the preview plans only the edited one's third) and squeezed into one
pool (every node and job in the edited quota's pool: the worst case). Each resize halves the
guarantee of the quota with the most GPUs charged to it (a shrink below what runs: the
preview lists the jobs above it) and then doubles it (waiting jobs start, lenders reclaim).
"again": a second preview of the same state, whose unchanged plan the page keeps
(web/views_quotas.py), plans once. The page also reads the snapshot first
(`load_snapshot`: bench/scheduler.py measures it, about 0.16 s at this size on PostgreSQL).
"""

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import report  # noqa: E402
from bench.synthetic import NOW, SIZES, Size, synthetic_snapshot, with_tree  # noqa: E402
from policy.quota_preview import QuotaEdit, only_pool, preview  # noqa: E402
from policy.scheduler.model import Snapshot  # noqa: E402
from policy.scheduler.plan import plan  # noqa: E402

TARGET_S = 1.0


def one_pool(snap: Snapshot) -> Snapshot:
    """Every node and quota in the first pool: the edited pool holds the whole cluster."""
    rt, gt = snap.nodes[0].resource_type, snap.nodes[0].gpu_type
    return replace(
        snap,
        nodes=tuple(replace(n, resource_type=rt, gpu_type=gt) for n in snap.nodes),
        quotas=tuple(replace(q, resource_type=rt, gpu_type=gt) for q in snap.quotas),
    )


def busiest(snap: Snapshot):
    """The leaf quota with the most GPUs charged to it (a resize of it touches running work)."""
    parents = {q.parent_id for q in snap.quotas}
    leaves = [q for q in snap.quotas if q.id not in parents]
    return max(leaves, key=lambda q: (q.used_gpus, q.id))


def run(size: Size, shape: str, repeat: int, seed: int) -> list[dict]:
    snap = with_tree(synthetic_snapshot(size, seed, 1.0, 0.3), seed)
    if shape == "one pool":
        snap = one_pool(snap)
    quota = busiest(snap)
    pool = quota.pool
    waiting = sum(1 for j in snap.jobs if _pool(snap, j.quota_id) == pool)
    nodes = sum(1 for n in snap.nodes if n.pool == pool)
    part = only_pool(snap, pool)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        plan(part, NOW)
        times.append(time.perf_counter() - start)
    rows = [
        {
            "what": f"plan() alone, {size.name}, {shape}: the edited pool",
            "nodes in pool": nodes,
            "waiting in pool": waiting,
            "ms best": round(min(times) * 1000, 1),
            "ms median": round(statistics.median(times) * 1000, 1),
        }
    ]
    for what, gpus in (("shrink to half", quota.gpus // 2), ("grow to double", quota.gpus * 2)):
        # A child never grows past its parent's guarantee; the what-if does not check rules.
        edit = QuotaEdit(quota.id, {"gpus": gpus})
        times, result = [], None
        for _ in range(repeat):
            start = time.perf_counter()
            result = preview(snap, edit, NOW)
            times.append(time.perf_counter() - start)
        assert result is not None
        again = []  # a second preview of the same state: the baseline plan is reused
        base = plan(part, NOW)
        for _ in range(repeat):
            start = time.perf_counter()
            preview(snap, edit, NOW, baseline=lambda _part, base=base: base)
            again.append(time.perf_counter() - start)
        median = statistics.median(times)
        rows.append(
            {
                "what": f"preview {size.name}, {shape}: {what} ({quota.gpus} -> {gpus})",
                "nodes in pool": nodes,
                "waiting in pool": waiting,
                "over": sum(len(o.jobs) for o in result.over),
                "reclaimed": len(result.reclaimed),
                "started": len(result.started),
                "ms best": round(min(times) * 1000, 1),
                "ms median": round(median * 1000, 1),
                "ms again (baseline kept)": round(statistics.median(again) * 1000, 1),
                "within target": median <= TARGET_S,
            }
        )
    return rows


def _pool(snap: Snapshot, quota_id: int):
    return next(q.pool for q in snap.quotas if q.id == quota_id)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also the large size")
    parser.add_argument("--repeat", type=int, help="default 3 (quick), 5 (--full)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    repeat = args.repeat or (5 if args.full else 3)
    sizes = ["medium", "large"] if args.full else ["medium"]
    rows = [
        row
        for name in sizes
        for shape in ("three pools", "one pool")
        for row in run(SIZES[name], shape, repeat, args.seed)
    ]
    worst = max(r["ms median"] for r in rows if r["what"].startswith("preview medium"))
    typical = max(
        r["ms median"] for r in rows if r["what"].startswith("preview medium, three pools")
    )
    report(
        "quota_preview",
        rows,
        quick=not args.full,
        repeat=repeat,
        medium_three_pools_ms=typical,
        medium_one_pool_ms=worst,
        target="preview of a resize, 2,000 nodes, 10,000 waiting jobs <= 1 s",
    )


if __name__ == "__main__":
    main()
