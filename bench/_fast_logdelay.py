"""Worker prints a line → the job page's log viewer has it: through the embedded default (a
threaded web server and the in-process loops in this process, a real agent with the process
runtime as a child process) and the page's own refresh (the viewer's JSON, polled every
500 ms as static/console.js does, at once again after a page with lines).

    .venv/bin/python bench/_fast_logdelay.py --lines 40

The worker prints its clock with each line; the delay is the time this process saw the line
minus that. Prints p50/p95 and one JSON line. A throw-away database.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _setup() -> str:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ["CONSOLE_LOOPS"] = "inprocess"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("API_RATE_LIMIT", "1000000/60")
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    db = settings.DATABASES["default"]
    db.setdefault("TEST", {})
    if connection.vendor == "sqlite":
        db["TEST"]["NAME"] = str(ROOT / "var" / "bench_logdelay.sqlite3")
    else:
        db["TEST"]["NAME"] = f"{db['NAME']}_bench_logdelay"
    old = db["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    return old


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--port", type=int, default=8792)
    args = parser.parse_args(argv)
    old = _setup()
    from django.contrib.auth import get_user_model
    from django.core.servers.basehttp import (
        ThreadedWSGIServer,
        WSGIRequestHandler,
        get_internal_wsgi_application,
    )
    from django.db import connection
    from django.test import Client

    from agents.actions import issue_bootstrap_token
    from agents.node.logship import FLUSH_AFTER
    from cluster.models import Node
    from console.loops import start_loops, stop_loops
    from jobs.actions.submit import JobSpec, create_jobs
    from jobs.models import Pod
    from quotas.models import Membership, Quota, ResourceType, Tenant, Workspace

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args) -> None:
            pass

    httpd = ThreadedWSGIServer(("127.0.0.1", args.port), Quiet)
    httpd.daemon_threads = True
    httpd.set_app(get_internal_wsgi_application())
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{args.port}"
    agent = None
    try:
        tenant = Tenant.objects.create(name="bench")
        workspace = Workspace.objects.create(tenant=tenant, name="bench")
        quota = Quota.objects.create(
            tenant=tenant, name="q", resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=8
        )
        workspace.quotas.add(quota)
        user = get_user_model().objects.create(username="bench")
        Membership.objects.create(workspace=workspace, user=user)
        _, bootstrap = issue_bootstrap_token(None, "bench")
        start_loops()
        state = Path(tempfile.mkdtemp(prefix="bench-logdelay-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT_")}
        env["GPU_AGENT_BOOTSTRAP_TOKEN"] = bootstrap
        agent = subprocess.Popen(
            [sys.executable, "-m", "agents.node", "--server", url, "--name", "bench-node",
             "--state-dir", str(state / "agent"), "--runtime", "process",
             "--fake-gpus", "8xH200", "--cpus", "64", "--memory-gb", "512"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not Node.objects.filter(name="bench-node").exists():
            assert time.monotonic() < deadline, "the agent did not register"
            time.sleep(0.1)
        command = (f"for i in $(seq 1 {args.lines}); do echo \"t=$(date +%s.%N)\"; "
                   "sleep 0.37; done")  # fmt: skip
        spec = JobSpec(name="printer", image="busybox", command=command, gpus_per_worker=1)
        (job,) = create_jobs(user=user, items=[(workspace, quota, spec)])
        page = Client()
        page.force_login(user)
        while not Pod.objects.filter(job=job).exists():
            time.sleep(0.05)
        after, delays = -1, []
        started = time.monotonic()
        while len(delays) < args.lines and time.monotonic() - started < 120:
            r = page.get(f"/jobs/{job.pk}/logs/", {"rank": 0, "after": after, "format": "json"})
            seen = time.time()
            body = r.json()
            for line in body["lines"]:
                text = line["text"] if isinstance(line, dict) else str(line)
                if "t=" in text:
                    delays.append(seen - float(text.split("t=", 1)[1].split()[0]))
            after = body["next_after"]
            if not body["lines"]:
                time.sleep(0.5)
        assert delays, "no lines seen"
        result = {
            "bench": "print_to_page",
            "database": connection.vendor,
            "flush_after_s": FLUSH_AFTER,
            "lines": len(delays),
            "p50_s": round(statistics.median(delays), 3),
            "p95_s": round(_pct(delays, 0.95), 3),
        }
        print(f"database {connection.vendor}, agent FLUSH_AFTER {FLUSH_AFTER} s, page poll 0.5 s, "
              f"{len(delays)} lines")  # fmt: skip
        print(f"print → page  p50 {result['p50_s']:.2f} s  p95 {result['p95_s']:.2f} s")
        print(json.dumps(result))
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(30)
        stop_loops()
        httpd.shutdown()
        from agents import wake

        if wake._watcher is not None:
            wake._watcher.close()
        if connection.vendor == "postgresql":  # the server's threads keep connections open
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
        connection.creation.destroy_test_db(old, verbosity=0)


if __name__ == "__main__":
    main()
