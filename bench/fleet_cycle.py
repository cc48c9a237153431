"""The scheduler's steady cycle in the fleet benchmark's state, without the fleet: N nodes x 8
GPUs all busy with one-GPU pods of one quota, `--queued` one-GPU jobs of that quota waiting.
Where a cycle's time goes at that size: the snapshot's reads (live pods, running jobs, the
waiting rows), plan(), and a profile of one cycle.

    .venv/bin/python -m bench.fleet_cycle                 # 2,000 nodes, 10,000 queued
    .venv/bin/python -m bench.fleet_cycle --nodes 1000 --profile   # one size a run

On a clean PostgreSQL database of its own (bench/common.py). bench/fleet.py measures the same
cycle under 2,000 agents on a bigger machine; this one runs anywhere, in a minute.
"""

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

GPUS, RESERVE = 8, 16  # as bench/fleet.py: a probe quota of 16 GPUs is left free


def fill(nodes: int, queued: int) -> None:
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from cluster.models import GpuDevice, Node
    from jobs.models import Job, Pod
    from policy.statuses import JobStatus, PodStatus
    from quotas.models import Quota, ResourceType, Tenant, Workspace

    capacity = nodes * GPUS
    with transaction.atomic():
        tenant = Tenant.objects.create(name="fleet")
        workspace = Workspace.objects.create(tenant=tenant, name="fleet")
        quota = {"tenant": tenant, "resource_type": ResourceType.LINGJUN, "gpu_type": "H200"}
        backlog = Quota.objects.create(name="backlog", gpus=capacity - RESERVE, **quota)
        workspace.quotas.add(backlog, Quota.objects.create(name="probe", gpus=RESERVE, **quota))
        user = get_user_model().objects.create(username="fleet")
        made = Node.objects.bulk_create(
            Node(name=f"fleet-{i:05d}", resource_type=ResourceType.LINGJUN, gpu_type="H200",
                 gpus=GPUS, cpus=256, memory_gb=2048)
            for i in range(nodes)
        )  # fmt: skip
        GpuDevice.objects.bulk_create(GpuDevice(node=n, index=i) for n in made for i in range(GPUS))
        job = {"workspace": workspace, "owner": user, "image": "simulated", "name": "backlog",
               "command": "simulated", "quota": backlog, "gpus_per_worker": 1,
               "cpus_per_worker": 1, "memory_gb_per_worker": 1}  # fmt: skip
        slots = [(n, i) for n in made for i in range(GPUS)][: capacity - RESERVE]
        runners = Job.objects.bulk_create(Job(status=JobStatus.RUNNING, **job) for _ in slots)
        Pod.objects.bulk_create(
            Pod(job=j, attempt=1, rank=0, node=n, gpu_indices=[i], gpus=1, cpus=1,
                memory_gb=1, charged_quota=backlog, status=PodStatus.RUNNING)
            for j, (n, i) in zip(runners, slots, strict=True)
        )  # fmt: skip
        Job.objects.bulk_create(Job(status=JobStatus.PENDING, **job) for _ in range(queued))


def measure(nodes: int, queued: int, repeat: int, profile: bool) -> dict:
    with common.clean_database(f"fleet_cycle_{nodes}") as url:
        common.setup_django(url)
        from django.db import connection
        from django.test.utils import CaptureQueriesContext
        from django.utils import timezone

        from jobs.scheduler.cycle import load_snapshot, plan, plan_options, run_cycle

        fill(nodes, queued)
        run_cycle()  # queues them all, with reasons
        cycles, reads, plans = [], [], []
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as queries:
                t = time.perf_counter()
                result = run_cycle()
                cycles.append(time.perf_counter() - t)
            now = timezone.now()
            t = time.perf_counter()
            snapshot, _ = load_snapshot(now, incremental=True)
            reads.append(time.perf_counter() - t)
            t = time.perf_counter()
            plan(snapshot, now, plan_options())
            plans.append(time.perf_counter() - t)
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            run_cycle()
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        return {
            "nodes": nodes, "pods": nodes * GPUS - RESERVE, "queued": queued,
            "cycle_ms": round(1000 * common.median(cycles), 1),
            "snapshot_ms": round(1000 * common.median(reads), 1),
            "plan_ms": round(1000 * common.median(plans), 1),
            "queries": len(queries), "admitted": len(result.admitted),
        }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the same (one size: 2,000)")
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one more cycle")
    args = parser.parse_args(argv)
    rows = [measure(args.nodes, args.queued, args.repeat, args.profile)]
    common.report(
        "fleet_cycle", rows, quick=not args.full,
        notes="medians; snapshot_ms and plan_ms are the cycle's two parts measured apart "
        "(the rest is the lock, the writes and the commit)",
    )  # fmt: skip


if __name__ == "__main__":
    main()
