"""Submit → Running on free capacity, through the embedded default: a threaded web server
and the in-process loops in this process, a real agent (`python -m agents.node`, process
runtime, fake GPUs, the default 5 s heartbeat) as a child process.

    .venv/bin/python bench/_fast_wake.py                    # waking on (agents.wake)
    AGENT_WAIT_SLOTS=0 .venv/bin/python bench/_fast_wake.py # waking off: the heartbeat alone

Each round submits one job over HTTP (`POST /api/v1/jobs`), waits until its pod is Running,
then stops it (`POST /api/v1/jobs/<id>/stop`) and waits until it is Stopped; prints p50/p95
of both delays and one JSON line. A throw-away database (never the configured one).
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
        db["TEST"]["NAME"] = str(ROOT / "var" / "bench_wake.sqlite3")
    else:
        db["TEST"]["NAME"] = f"{db['NAME']}_bench_wake"
    old = db["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    return old


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--port", type=int, default=8791)
    args = parser.parse_args(argv)
    old = _setup()
    import requests
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.servers.basehttp import (
        ThreadedWSGIServer,
        WSGIRequestHandler,
        get_internal_wsgi_application,
    )
    from django.db import connection

    from accounts.actions import issue_api_token
    from agents.actions import issue_bootstrap_token
    from console.loops import start_loops, stop_loops
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
        _, token = issue_api_token(user)
        _, bootstrap = issue_bootstrap_token(None, "bench")
        start_loops()
        state = Path(tempfile.mkdtemp(prefix="bench-wake-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT_")}
        env["GPU_AGENT_BOOTSTRAP_TOKEN"] = bootstrap
        agent = subprocess.Popen(
            [sys.executable, "-m", "agents.node", "--server", url, "--name", "bench-node",
             "--state-dir", str(state / "agent"), "--runtime", "process",
             "--fake-gpus", "8xH200", "--cpus", "64", "--memory-gb", "512"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        api = requests.Session()
        api.headers["Authorization"] = f"Bearer {token}"
        deadline = time.monotonic() + 30
        from cluster.models import Node

        while not Node.objects.filter(name="bench-node").exists():
            assert time.monotonic() < deadline, "the agent did not register"
            time.sleep(0.1)
        time.sleep(1)  # its first heartbeat
        spec = {"quota": "q", "image": "busybox", "command": "sleep 600", "gpus_per_worker": 1}

        def until(pod_filter, status: str) -> float:
            started = time.monotonic()
            while not Pod.objects.filter(**pod_filter, status=status).exists():
                assert time.monotonic() - started < 60, f"no pod {status} in 60 s"
                time.sleep(0.01)
            return time.monotonic()

        to_run, to_stop = [], []
        for i in range(args.rounds):
            time.sleep(0.37 * (i % 7))  # submit at varying points of the heartbeat cycle
            t0 = time.monotonic()
            r = api.post(f"{url}/api/v1/jobs", json=spec)
            assert r.status_code == 201, r.text[:300]
            job_id = r.json()["id"]
            to_run.append(until({"job_id": job_id}, "Running") - t0)
            t1 = time.monotonic()
            r = api.post(f"{url}/api/v1/jobs/{job_id}/stop", json={})
            assert r.status_code == 200, r.text[:300]
            to_stop.append(until({"job_id": job_id}, "Stopped") - t1)
        waking = settings.AGENT_WAIT_SLOTS > 0
        result = {
            "bench": "wake",
            "database": connection.vendor,
            "waking": waking,
            "rounds": args.rounds,
            "submit_to_running_p50_s": round(statistics.median(to_run), 3),
            "submit_to_running_p95_s": round(_pct(to_run, 0.95), 3),
            "stop_to_stopped_p50_s": round(statistics.median(to_stop), 3),
            "stop_to_stopped_p95_s": round(_pct(to_stop, 0.95), 3),
        }
        print(f"database {connection.vendor}, waking {'on' if waking else 'off'}, "
              f"{args.rounds} rounds, heartbeat {settings.AGENT_HEARTBEAT_INTERVAL} s")  # fmt: skip
        print(f"submit → Running  p50 {result['submit_to_running_p50_s']:.2f} s  "
              f"p95 {result['submit_to_running_p95_s']:.2f} s")  # fmt: skip
        print(f"stop → Stopped    p50 {result['stop_to_stopped_p50_s']:.2f} s  "
              f"p95 {result['stop_to_stopped_p95_s']:.2f} s")  # fmt: skip
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
