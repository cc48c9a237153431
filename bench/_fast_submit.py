"""CPU time and statements per single `POST /api/v1/jobs`, through Django's test client in
this process (no network), on a throw-away database next to the configured one.

    .venv/bin/python bench/_fast_submit.py
    DATABASE_URL=postgres://… .venv/bin/python bench/_fast_submit.py --posts 500

Each POST adds a Pending job (the scheduler is not run), so later ones see more waiting jobs.
Prints the statements of one submission, CPU and wall ms per request, and one JSON line.
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=300)
    args = parser.parse_args(argv)
    import api_submit  # the submission benchmark's throw-away database and fixtures

    old = api_submit._setup()
    import logging

    from django.db import connection
    from django.test import Client

    logging.getLogger("console.access").setLevel(logging.WARNING)
    try:
        _user, _workspace, _quota, token = api_submit._fixtures()
        client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
        body = json.dumps(api_submit.SPEC)

        def post() -> None:
            response = client.post("/api/v1/jobs", body, content_type="application/json")
            assert response.status_code == 201, response.content[:300]

        post()
        statements: list[str] = []

        def capture(execute, sql, params, many, context):
            statements.append(sql)
            return execute(sql, params, many, context)

        with connection.execute_wrapper(capture):
            post()
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(args.posts):
            post()
        cpu = (time.process_time() - c0) / args.posts * 1000
        wall = (time.perf_counter() - w0) / args.posts * 1000
        for sql in statements:
            print("   ", sql[:110])
        result = {
            "bench": "submit_single",
            "database": connection.vendor,
            "posts": args.posts,
            "statements": len(statements),
            "cpu_ms": round(cpu, 2),
            "wall_ms": round(wall, 2),
        }
        print(f"database {connection.vendor}: {len(statements)} statements, CPU {cpu:.2f} ms, "
              f"wall {wall:.2f} ms per POST /api/v1/jobs")  # fmt: skip
        print(json.dumps(result))
    finally:
        connection.creation.destroy_test_db(old, verbosity=0)


if __name__ == "__main__":
    main()
