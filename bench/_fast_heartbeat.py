"""CPU time and queries per heartbeat where nothing changed (a node with 8 GPUs and N running
workers reporting as known), through Django's test client in this process (no network).

    .venv/bin/python bench/_fast_heartbeat.py
    DATABASE_URL=postgres://… .venv/bin/python bench/_fast_heartbeat.py --beats 2000

Prints CPU ms and wall ms per heartbeat (median of --repeat runs) and the statements one
heartbeat runs, then one JSON line. A throw-away database (never the configured one).
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _setup() -> str:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ["CONSOLE_LOOPS"] = "inprocess"  # commits wake no scheduler
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    import logging

    logging.getLogger("console.access").setLevel(logging.WARNING)
    from django.conf import settings
    from django.db import connection

    db = settings.DATABASES["default"]
    db.setdefault("TEST", {})
    if connection.vendor == "sqlite":
        db["TEST"]["NAME"] = str(ROOT / "var" / "bench_heartbeat.sqlite3")
    else:
        db["TEST"]["NAME"] = f"{db['NAME']}_bench_heartbeat"
    old = db["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    return old


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beats", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile summary")
    args = parser.parse_args(argv)
    old = _setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from agents.actions import issue_bootstrap_token
    from jobs.models import Job, Pod
    from jobs.statuses import JobStatus, PodStatus
    from quotas.models import Quota, ResourceType, Tenant, Workspace

    try:
        client = Client()
        gpus = [
            {"index": i, "uuid": f"GPU-{i:04d}", "name": "NVIDIA H200", "memory_total_mb": 143771}
            for i in range(8)
        ]
        facts = {
            "hostname": "h", "agent_version": "0.1.0", "runtime": "process",
            "resource_type": "Lingjun", "gpu_type": "H200", "cpus": 96, "memory_gb": 1024,
            "gpus": gpus,
        }  # fmt: skip
        _, bootstrap = issue_bootstrap_token(None, "bench")
        r = client.post("/api/v1/agent/register/", json.dumps({"name": "n1", "facts": facts}),
                        content_type="application/json",
                        headers={"Authorization": f"Bearer {bootstrap}"})  # fmt: skip
        node_id, token = r.json()["node_id"], r.json()["node_token"]
        tenant = Tenant.objects.create(name="t")
        workspace = Workspace.objects.create(tenant=tenant, name="w")
        quota = Quota.objects.create(tenant=tenant, name="q", resource_type=ResourceType.LINGJUN,
                                     gpu_type="H200", gpus=8)  # fmt: skip
        owner = get_user_model().objects.create(username="u")
        job = Job.objects.create(workspace=workspace, quota=quota, owner=owner, name="j",
                                 image="i", command="c", workers=args.workers,
                                 gpus_per_worker=1, status=JobStatus.RUNNING)  # fmt: skip
        pods = [
            Pod.objects.create(job=job, attempt=1, rank=r, node_id=node_id, gpu_indices=[r],
                               gpus=1, charged_quota=quota, status=PodStatus.RUNNING)
            for r in range(args.workers)
        ]  # fmt: skip
        workers = [
            {"pod_id": p.pk, "attempt": 1, "state": "running", "container_id": f"c{p.pk}"}
            for p in pods
        ]
        body = json.dumps({"facts": facts, "workers": workers})
        headers = {"Authorization": f"Bearer {token}"}

        def beat():
            response = client.post("/api/v1/agent/heartbeat/", body,
                                   content_type="application/json", headers=headers)  # fmt: skip
            assert response.status_code == 200, response.content[:300]

        beat()
        queries: list[dict] = []

        def capture(execute, sql, params, many, context):
            queries.append({"sql": sql})
            return execute(sql, params, many, context)

        with connection.execute_wrapper(capture):
            beat()
        if args.profile:
            import cProfile
            import pstats

            profile = cProfile.Profile()
            profile.runcall(lambda: [beat() for _ in range(args.beats)])
            pstats.Stats(profile).sort_stats("cumtime").print_stats(45)
        cpu, wall = [], []
        for _ in range(args.repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(args.beats):
                beat()
            cpu.append((time.process_time() - c0) / args.beats * 1000)
            wall.append((time.perf_counter() - w0) / args.beats * 1000)
        result = {
            "bench": "heartbeat_no_change",
            "database": connection.vendor,
            "workers": args.workers,
            "gpus": 8,
            "queries": len(queries),
            "cpu_ms": round(statistics.median(cpu), 3),
            "wall_ms": round(statistics.median(wall), 3),
        }
        print(f"database {connection.vendor}, 8 GPUs, {args.workers} running workers, "
              f"{args.beats} heartbeats x {args.repeat}")  # fmt: skip
        print(f"CPU {result['cpu_ms']:.2f} ms, wall {result['wall_ms']:.2f} ms per heartbeat; "
              f"{len(queries)} statements:")  # fmt: skip
        for q in queries:
            print("   ", q["sql"][:110])
        print(json.dumps(result))
    finally:
        connection.creation.destroy_test_db(old, verbosity=0)


if __name__ == "__main__":
    main()
