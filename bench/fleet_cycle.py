"""The scheduler's steady cycle in the fleet benchmark's state, without the fleet: N nodes x 8
GPUs all busy with one-GPU pods of one quota, `--queued` one-GPU jobs of that quota waiting.
Where a cycle's time goes at that size: the snapshot's reads (live pods, running jobs, the
waiting rows), plan(), and a profile of one cycle.

    .venv/bin/python -m bench.fleet_cycle          # 2,000 nodes, 10,000 queued, churn 0 and 200
    .venv/bin/python -m bench.fleet_cycle --full   # 200, 1,000 and 2,000 nodes (a process each)
    .venv/bin/python -m bench.fleet_cycle --nodes 1000 --churn 200 --profile

On a clean PostgreSQL database of its own (bench/common.py). bench/fleet.py measures the same
cycle under 2,000 agents on a bigger machine; this one runs anywhere, in a minute.
"""

import argparse
import cProfile
import json
import pstats
import subprocess
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


def churn(count: int) -> None:
    """`count` running jobs end (their pods exit, as agents' reports do), so the next cycle
    places as many from the queue: a cycle with changes, as in the fleet."""
    from django.db import transaction
    from django.utils import timezone

    from jobs.models import Job, Pod
    from policy.statuses import JobStatus, PodStatus

    with transaction.atomic():
        ended = list(
            Job.objects.filter(status__in=[JobStatus.RUNNING, JobStatus.STARTING])
            .order_by("?")
            .values_list("id", flat=True)[:count]
        )
        now = timezone.now()
        Pod.objects.filter(job_id__in=ended).update(status=PodStatus.SUCCEEDED, finished_at=now)
        Job.objects.filter(id__in=ended).update(status=JobStatus.COMPLETED, finished_at=now)


def measure(nodes: int, queued: int, repeat: int, profile: bool, churns: list[int]) -> list:
    """One size, on its own database: a row per churn (jobs ended before each cycle)."""
    with common.clean_database(f"fleet_cycle_{nodes}") as url:
        common.setup_django(url)
        from django.db import connection
        from django.test.utils import CaptureQueriesContext
        from django.utils import timezone

        from jobs.scheduler.cycle import load_snapshot, plan, plan_options, run_cycle

        fill(nodes, queued)
        run_cycle()  # queues them all, with reasons
        rows = []
        for ended in churns:
            cycles, reads, plans = [], [], []
            for _ in range(repeat):
                churn(ended)
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
                churn(ended)
                profiler = cProfile.Profile()
                profiler.enable()
                run_cycle()
                profiler.disable()
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
            rows.append({
                "nodes": nodes, "pods": nodes * GPUS - RESERVE, "queued": queued,
                "churn": ended, "cycle_ms": round(1000 * common.median(cycles), 1),
                "cycle_max_ms": round(1000 * max(cycles), 1),
                "snapshot_ms": round(1000 * common.median(reads), 1),
                "plan_ms": round(1000 * common.median(plans), 1),
                "queries": len(queries), "admitted": len(result.admitted),
            })  # fmt: skip
        return rows


def _each_size(sizes: list[int], argv: list[str]) -> list:
    """One process per size (Django is set up once a process, on one database)."""
    rows = []
    for nodes in sizes:
        cmd = [sys.executable, "-m", "bench.fleet_cycle", *argv, "--nodes", str(nodes)]
        out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
        lines = [line for line in out.splitlines() if line.startswith(common.JSON_MARK)]
        rows += json.loads(lines[-1][len(common.JSON_MARK) :])["rows"]
    return rows


def _numbers(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="three sizes: 200, 1,000, 2,000")
    parser.add_argument("--nodes", type=_numbers, help="sizes, comma-separated (default 2000)")
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--profile", action="store_true", help="cProfile one more cycle")
    parser.add_argument(
        "--churn", type=_numbers, default=[0, 200],
        help="jobs that end before each cycle, which then places as many; comma-separated",
    )  # fmt: skip
    args = parser.parse_args(argv)
    sizes = args.nodes or ([200, 1000, 2000] if args.full else [2000])
    if len(sizes) > 1:
        passed = ["--queued", str(args.queued), "--repeat", str(args.repeat)]
        passed += ["--churn", ",".join(map(str, args.churn))]
        rows = _each_size(sizes, passed + (["--profile"] if args.profile else []))
    else:
        rows = measure(sizes[0], args.queued, args.repeat, args.profile, args.churn)
    common.report(
        "fleet_cycle", rows, quick=not args.full,
        notes="medians; snapshot_ms and plan_ms are the cycle's two parts measured apart "
        "(the rest is the lock, the writes and the commit); churn: jobs ended before each "
        "cycle, which places as many",
    )  # fmt: skip


if __name__ == "__main__":
    main()
