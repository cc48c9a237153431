"""The benchmark suite: runs every benchmark (quick variants by default, `--full` for the
full ones), each in its own process on its own clean database, and writes what each
printed as its JSON line into bench/results.json with the machine, date and commit.

    .venv/bin/python bench/run.py                  # quick: under 10 minutes on 2 cores
    .venv/bin/python bench/run.py --full           # the sizes the issue asks for
    .venv/bin/python bench/run.py --only http,pages
    .venv/bin/python bench/run.py --full --only fleet --with fleet='--nodes 200'
    make bench [FULL=1]

Each benchmark also runs alone: `.venv/bin/python -m bench.<name> [--full]`.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

# In the order they run: the cheap ones first, so a broken environment shows at once.
BENCHMARKS = [
    "scheduler",  # plan() at three sizes, the DB cycle at 2,000 and 5,000 nodes
    "forecast",
    "fence_rss",
    "api_submit",  # the create paths in-process (no HTTP)
    "percall",  # CPU and statements per submit, per quiet and per busy heartbeat, in-process
    "ledger",  # the agent's ledger writes: a launch and an exit, 1,000 finished remembered
    "throughput",  # submissions and heartbeats through gunicorn, CPU per request
    "wake",  # submit -> Running and stop -> Stopped through a real agent (agents.wake)
    "logs",  # log ingest, print-to-page delay through a real agent
    "pages",  # pages at 100k jobs / 1,000 nodes / 1M log lines
    "usage",  # usage history: the roll-up, the Usage page and API at 13 months of buckets
    "quota_preview",  # the owner pages' what-if of a resize at 2,000 nodes, 10,000 waiting
    "results_accept",  # counted results: 10,000 units accepted, the result API, accept()
    "inputs_hash",  # the data folders' content manifest against sha256sum, cold and cached
    "fleet_cycle",  # the scheduler's cycle in the fleet's state (2,000 nodes), no fleet
    "fleet",  # N agents over the real protocol against gunicorn + Celery + PostgreSQL + Redis
    "kueue_sim",  # the same baseline on the policy alone (the simulator, no product latency)
    "kueue",  # Kueue's scheduler baseline through the whole product
    "philly",  # Philly what-if: idle off vs on, with a chart
]


def run_one(name: str, full: bool, timeout: float, extra: str = "") -> dict:
    cmd = [sys.executable, "-m", f"bench.{name}"] + (["--full"] if full else []) + extra.split()
    print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
    started = time.perf_counter()
    payload: dict = {"bench": name, "error": None}
    try:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, env=os.environ.copy()
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(common.JSON_MARK):
                payload = json.loads(line[len(common.JSON_MARK) :]) | {"error": None}
            else:
                print(line, end="", flush=True)
        code = proc.wait(timeout=timeout)
        if code != 0:
            payload["error"] = f"exit {code}"
    except subprocess.TimeoutExpired:
        proc.kill()
        payload["error"] = f"timed out after {timeout:.0f} s"
    payload["wall_seconds"] = round(time.perf_counter() - started, 1)
    error = f"  ERROR {payload['error']}" if payload["error"] else ""
    print(f"=== {name}: {payload['wall_seconds']} s{error}")
    return payload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full sizes (long)")
    parser.add_argument("--only", help="comma-separated subset of: " + ", ".join(BENCHMARKS))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results.json"))
    parser.add_argument("--timeout", type=float, default=3600, help="per benchmark, seconds")
    parser.add_argument(
        "--with",
        dest="extra",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="more arguments for one benchmark, e.g. fleet='--nodes 200' (a machine too small "
        "for the full sizes)",
    )
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.extra if "=" in item)
    names = BENCHMARKS
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in BENCHMARKS]
        if unknown:
            parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHMARKS)}")
    info = common.machine()
    started = time.perf_counter()
    # One migrated template for the whole run (each benchmark clones its own database).
    os.environ["BENCH_TEMPLATE"] = template = f"{common.PREFIX}tpl_{common._migrations_hash()}"
    try:
        common.template()
        results = [run_one(n, args.full, args.timeout, extra.get(n, "")) for n in names]
    finally:
        common.drop_database(template)
    total = round(time.perf_counter() - started, 1)
    out = {
        "machine": info,
        "variant": "full" if args.full else "quick",
        "with": extra,
        "total_seconds": total,
        "benchmarks": {r["bench"]: r for r in results},
    }
    Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    failed = [r["bench"] for r in results if r.get("error")]
    print(f"\nsuite: {len(results)} benchmarks in {total} s; results in {args.out}")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
