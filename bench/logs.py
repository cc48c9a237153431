"""Log ingest and print-to-page delay through a real agent (process runtime) and gunicorn on
a clean PostgreSQL database.

1. Print-to-page: a worker prints a line with its wall-clock time every 20 ms; a reader
   polls the same URL the job page's log viewer polls (`/jobs/<id>/logs/?format=json&
   after=<seq>`, as the signed-in owner) and notes when each line first appears. Measured
   twice: polling every 50 ms (the server side alone) and at the page's own rhythm
   (static/console.js: every 500 ms while idle, at once again after a page with lines).
2. Ingest: a worker prints N lines as fast as it can; lines/s from the first stored chunk to
   the last, through the agent's batches to `POST /api/v1/agent/logs/`.

The job is submitted through the API and placed by `run_cycle()` called here (no Celery).

    .venv/bin/python -m bench.logs            # quick: 200 timed lines, 100,000 ingested
    .venv/bin/python -m bench.logs --full     # 500 timed lines, 500,000 ingested
"""

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.load import Client  # noqa: E402
from bench.pages import session_cookie  # noqa: E402

TIMED = "import sys,time\nfor i in range({n}):\n print(f'{{time.time():.6f}} {{i}}', flush=True)\n time.sleep({gap})"  # noqa: E501
# Paced just under the agent's per-worker rate limit (agents.node.logstream: 5,000 lines/s,
# lines over it are dropped), so that the figure is the pipeline's, not the limit's.
BULK = "import sys,time\nw=sys.stdout.write\nt=time.time()\nfor i in range({n}):\n w(f'line {{i}} ' + 'x'*60 + '\\n')\n if i % 450 == 449:\n  sys.stdout.flush(); t += 0.1; time.sleep(max(0, t - time.time()))\nsys.stdout.flush()"  # noqa: E501


def submit(client: Client, token: str, name: str, code: str, workers: int = 1) -> int:
    spec = {
        "quota": "bench-h200", "name": name, "image": "python", "gpus_per_worker": 1,
        "workers": workers,
        "cpus_per_worker": 1, "memory_gb_per_worker": 1,
        "command": f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}",
    }  # fmt: skip
    status, body = client.json("POST", "/api/v1/jobs", spec, {"Authorization": f"Bearer {token}"})
    if status != 201:
        raise RuntimeError(f"submit refused: {status} {body}")
    return body["id"]


def schedule_until_started(job_id: int, timeout: float = 120) -> None:
    from jobs.models import Job
    from jobs.scheduler.cycle import run_cycle

    deadline = time.monotonic() + timeout
    while Job.objects.get(pk=job_id).status not in ("Starting", "Running", "Completed"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} was not placed in {timeout} s")
        run_cycle()
        time.sleep(0.2)


def follow(client: Client, cookie: str, job_id: int, n: int, poll: float, page_rhythm: bool):
    """Poll the viewer's URL; returns each line's delay (seen - printed), seconds."""
    after, delays = -1, []
    base = f"/jobs/{job_id}/logs/?attempt=1&rank=0&format=json"
    deadline = time.monotonic() + 120 + n * 0.05
    while len(delays) < n and time.monotonic() < deadline:
        status, body = client.json("GET", f"{base}&after={after}", None, {"Cookie": cookie})
        seen = time.time()
        if status != 200:
            raise RuntimeError(f"log viewer: {status} {body}")
        for line in body["lines"]:
            text = line["text"].split()
            if len(text) == 2 and text[1].isdigit():
                delays.append(seen - float(text[0]))
        after = body["next_after"]
        if page_rhythm and body["lines"]:
            continue  # console.js polls again at once after a page with lines
        time.sleep(poll)
    return delays


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args(argv)
    timed, bulk = (500, 500_000) if args.full else (200, 100_000)
    writers = 16 if args.full else 8  # workers of the ingest job, one node
    work = ROOT / "var" / "bench-logs"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    rows = []
    with common.clean_database("logs") as url:
        common.setup_django(url)
        from django.contrib.auth import get_user_model

        from agents.actions import issue_bootstrap_token
        from bench.throughput import fixtures
        from jobs.models import Job, LogChunk

        token, _ = fixtures(nodes=0)  # the agent's node is the only one
        cookie = session_cookie(get_user_model().objects.get(username="bench"))
        _, boot = issue_bootstrap_token(None, "logs bench")
        env = common.bench_env(url)
        with common.gunicorn(env) as (base, _pid):
            agent_env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT_")}
            agent_env["GPU_AGENT_BOOTSTRAP_TOKEN"] = boot
            log = (work / "agent.log").open("wb")
            agent = subprocess.Popen(
                [common.PYTHON, "-m", "agents.node", "--server", base, "--name", "logs-node",
                 "--state-dir", str(work / "agent"), "--runtime", "process",
                 "--fake-gpus", "16xH200", "--cpus", "64", "--memory-gb", "512",
                 "--log-level", "WARNING"],
                cwd=ROOT, env=agent_env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                client = Client(base)
                from cluster.models import Node

                deadline = time.monotonic() + 120
                while not Node.objects.filter(name="logs-node", gpus=16).exists():
                    if time.monotonic() > deadline:
                        raise RuntimeError("the agent did not register (var/bench-logs/)")
                    time.sleep(0.2)
                for label, poll, rhythm in (
                    ("print -> visible, viewer polling every 50 ms", 0.05, False),
                    ("print -> visible, page rhythm (500 ms idle poll)", 0.5, True),
                ):
                    job = submit(client, token, "timed", TIMED.format(n=timed, gap=0.02))
                    schedule_until_started(job)
                    delays = follow(Client(base), cookie, job, timed, poll, rhythm)
                    rows.append({
                        "what": label,
                        "lines": len(delays),
                        "p50_ms": round(1000 * common.percentile(delays, 50), 1),
                        "p95_ms": round(1000 * common.percentile(delays, 95), 1),
                        "max_ms": round(1000 * max(delays), 1) if delays else None,
                    })  # fmt: skip
                job = submit(client, token, "bulk", BULK.format(n=bulk // writers), writers)
                schedule_until_started(job)
                deadline = time.monotonic() + 600
                stored, same = -1, 0
                while same < 6 and time.monotonic() < deadline:  # final and 3 s without news
                    time.sleep(0.5)
                    chunks = LogChunk.objects.filter(pod__job_id=job)
                    now = sum(e - s + 1 for s, e in chunks.values_list("seq_start", "seq_end"))
                    final = Job.objects.get(pk=job).status in ("Completed", "Failed")
                    same = same + 1 if now == stored and final else 0
                    stored = now
                dropped = sum(
                    int(t.split("[agent] ")[1].split()[0])
                    for text in chunks.values_list("text", flat=True)
                    for t in text.splitlines()
                    if t.startswith("[agent] ") and "log lines dropped" in t
                )
                times = chunks.order_by("created_at").values_list("created_at", flat=True)
                first, last = times.first(), times.last()
                span = (last - first).total_seconds() if first and last else float("nan")
                rows.append({
                    "what": f"ingest: {writers} workers x {bulk // writers:,} lines",
                    "lines": stored,
                    "dropped": dropped,
                    "lines_per_s": round(stored / span) if span == span and span > 0 else None,
                    "seconds": round(span, 2),
                })  # fmt: skip
                status = Job.objects.get(pk=job).status
                print(f"bulk job ended {status}", flush=True)
            finally:
                agent.terminate()
                try:
                    agent.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    agent.kill()
                log.close()
    common.report(
        "logs",
        rows,
        quick=not args.full,
        notes="a real agent (process runtime, its default flush), gunicorn 4 x 4; delay = "
        "when the viewer's poll first returned the line - the worker's print time",
        targets={"print_to_page_p95_ms": 1000, "ingest_lines_per_s": 50_000},
        print_to_page_p95_ms=rows[1]["p95_ms"],
        ingest_lines_per_s=rows[2].get("lines_per_s"),
    )


if __name__ == "__main__":
    main()
