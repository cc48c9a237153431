"""Submission benchmark: jobs per second through the API's create paths.

    .venv/bin/python -m bench.api_submit [--full]       # the suite: a clean PostgreSQL db
    .venv/bin/python bench/api_submit.py --here          # on SQLite (var/bench_submit.sqlite3)
    DATABASE_URL=postgres://… .venv/bin/python bench/api_submit.py --here --jobs 2000

Measures, on a throw-away database next to the configured one (never written itself):
- `jobs.actions.submit.create_jobs` alone (one transaction, bulk inserts);
- `POST /api/v1/jobs/array` (one request: auth, rate limit, form validation once, bulk
  insert, notices to audit and notifications, JSON of every job);
- `POST /api/v1/jobs/batch` (independent specs, each validated by the form);
- `POST /api/v1/jobs` one job per request, with an Idempotency-Key;
each through Django's test client in this process (no network), and prints jobs/s and
the ratio to the single-job path.
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


def _setup(clean_url: str | None = None) -> str | None:
    if clean_url:  # the suite: a clean database of its own (bench/common.py)
        from bench import common

        common.setup_django(clean_url)
        return None
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("CONSOLE_LOOPS", "inprocess")  # commits wake no scheduler
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("API_RATE_LIMIT", "1000000/60")
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    db = settings.DATABASES["default"]
    db.setdefault("TEST", {})
    if connection.vendor == "sqlite":
        db["TEST"]["NAME"] = str(ROOT / "var" / "bench_submit.sqlite3")
    else:
        db["TEST"]["NAME"] = f"bench_submit_{db['NAME']}"
    old = db["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    return old


def _fixtures():
    from bench import common
    from cluster.models import Node
    from quotas.models import ResourceType

    user, workspace, quota, token = common.researcher_with_quota("bench-h200")
    Node.objects.create(
        name="n0", resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=8, cpus=128,
        memory_gb=2048,
    )  # fmt: skip
    return user, workspace, quota, token


SPEC = {"quota": "bench-h200", "image": "busybox", "command": "train", "gpus_per_worker": 1}


ROWS: list[dict] = []


def _timed(label: str, jobs: int, fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    rate = jobs / median
    print(f"{label:<44}{jobs:>7}{median * 1000:>11.1f} ms{rate:>12,.0f} jobs/s")
    ROWS.append(
        {"path": label, "jobs": jobs, "ms": round(median * 1000, 1), "jobs_per_s": round(rate)}
    )
    return rate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per array/batch request")
    parser.add_argument("--single", type=int, default=200, help="single-job requests")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="the suite's full variant")
    parser.add_argument(
        "--here", action="store_true", help="on a throw-away copy of DATABASE_URL's database"
    )
    args = parser.parse_args(argv)
    if args.here:
        _main(args, _setup())
        return
    from bench import common

    if not args.full:
        args.jobs, args.single, args.repeat = 500, 100, 1
    with common.clean_database("api_submit") as url:
        _main(args, _setup(url))
    common.report(
        "api_submit",
        ROWS,
        quick=not args.full,
        notes="in-process Django test client (no HTTP, no gunicorn); see bench.http for "
        "the real server",
    )


def _main(args, old: str | None) -> None:
    from django.conf import settings
    from django.db import connection
    from django.test import Client

    from jobs.actions.submit import JobSpec, create_jobs

    try:
        user, workspace, quota, token = _fixtures()
        client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
        n = args.jobs
        print(f"database: {connection.vendor}; {n} jobs per bulk request")
        print(f"{'path':<44}{'jobs':>7}{'median':>14}{'rate':>17}")

        def actions():
            spec = JobSpec(name="bench", image="busybox", command="run")
            create_jobs(user=user, items=[(workspace, quota, spec)] * n)

        def post(path: str, body, **headers):
            response = client.post(path, json.dumps(body), content_type="application/json",
                                   headers=headers)  # fmt: skip
            assert response.status_code == 201, response.content[:300]

        def array():
            post("/api/v1/jobs/array", {"count": n, "job": SPEC})

        def batch():
            post("/api/v1/jobs/batch", {"jobs": [SPEC | {"name": f"b{i}"} for i in range(n)]})

        counter = iter(range(10**9))

        def singles():
            for _ in range(args.single):
                post("/api/v1/jobs", SPEC, **{"Idempotency-Key": f"k-{next(counter)}"})

        base = _timed("create_jobs (action, no HTTP)", n, actions, args.repeat)
        arr = _timed("POST /api/v1/jobs/array", n, array, args.repeat)
        bat = _timed("POST /api/v1/jobs/batch", n, batch, args.repeat)
        one = _timed("POST /api/v1/jobs (one per request, key)", args.single, singles, 1)
        print(
            f"ratios to one-per-request: array {arr / one:.1f}x, batch {bat / one:.1f}x, "
            f"action alone {base / one:.1f}x"
        )
    finally:
        if old is not None:
            connection.creation.destroy_test_db(old, verbosity=0)
            settings.DATABASES["default"]["NAME"] = old


if __name__ == "__main__":
    main()
