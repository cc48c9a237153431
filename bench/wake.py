"""Submit → Running and stop → Stopped on free capacity, through the embedded default (a
threaded web server and the in-process loops in this process) and a real agent
(`python -m agents.node`, process runtime, fake GPUs, the default 5 s heartbeat) as a child
process, on a clean PostgreSQL database.

    .venv/bin/python -m bench.wake              # waking on (agents.wake), 20 rounds
    .venv/bin/python -m bench.wake --no-wake    # waking off: the agent's heartbeat alone
    .venv/bin/python -m bench.wake --full       # 60 rounds
    .venv/bin/python -m bench.wake --clients 20 # 20 clients at once, each its own rounds

Each round submits one job over HTTP (`POST /api/v1/jobs`), waits until its pod is Running,
then stops it (`POST /api/v1/jobs/<id>/stop`) and waits until it is Stopped; then submits a
job whose worker runs 0.3 s (`sleep 0.3`: it ends while the agent is idle, as a real job
does) and waits until its pod has Succeeded (the exit's report: docs/agent-protocol.md,
"Exits gathered"). Target: submit
→ Running p95 <= 1 s without raising the heartbeat rate. With `--clients N`, N clients do
their rounds at once (the node has a GPU per client, so nothing queues): stop → Stopped p95
<= 1 s under that load.
"""

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

# How often each client looks for its pod's status (the database, from this process): 10 ms
# alone, 50 ms with several. Every client's poll runs in the console's own process here (the
# embedded default): 20 clients at 10 ms were 2,000 queries a second competing with the
# server for the interpreter (stop p95 5.5 s, against 0.75 s at 50 ms).
POLL_ALONE, POLL_MANY = 0.01, 0.05


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="60 rounds")
    parser.add_argument("--rounds", type=int, help="default 20 (quick), 60 (--full)")
    parser.add_argument("--no-wake", action="store_true", help="AGENT_WAIT_SLOTS=0")
    parser.add_argument("--clients", type=int, default=1, help="clients at once (default 1)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (60 if args.full else 20)
    extra = {"AGENT_WAIT_SLOTS": "0"} if args.no_wake else {}
    with common.clean_database("wake") as url:
        common.setup_django(url, **extra)
        logging.getLogger("console.access").setLevel(logging.WARNING)
        measure(rounds, args.clients)


def measure(rounds: int, clients: int = 1) -> None:
    import requests
    from django.conf import settings
    from django.core.servers.basehttp import (
        ThreadedWSGIServer,
        WSGIRequestHandler,
        get_internal_wsgi_application,
    )
    from django.db import connection

    from agents.actions import issue_bootstrap_token
    from console.loops import start_loops, stop_loops
    from jobs.models import Pod

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args) -> None:
            pass

    httpd = ThreadedWSGIServer(("127.0.0.1", common.free_port()), Quiet)
    httpd.daemon_threads = True
    httpd.set_app(get_internal_wsgi_application())
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    agent = None
    try:
        gpus = max(8, clients)
        _, _, _, token = common.researcher_with_quota(gpus=gpus)
        _, bootstrap = issue_bootstrap_token(None, "bench")
        start_loops()
        state = Path(tempfile.mkdtemp(prefix="bench-wake-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT_")}
        env["GPU_AGENT_BOOTSTRAP_TOKEN"] = bootstrap
        agent = subprocess.Popen(
            [sys.executable, "-m", "agents.node", "--server", url, "--name", "bench-node",
             "--state-dir", str(state / "agent"), "--runtime", "process",
             "--fake-gpus", f"{gpus}xH200", "--cpus", "256", "--memory-gb", "4096"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
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
                time.sleep(POLL_ALONE if clients == 1 else POLL_MANY)
            return time.monotonic()

        to_run: list[float] = []
        to_stop: list[float] = []
        to_done: list[float] = []
        errors: list[str] = []

        def client(offset: int) -> None:
            api = requests.Session()
            api.headers["Authorization"] = f"Bearer {token}"
            try:
                for i in range(rounds):
                    # submit at varying points of the heartbeat cycle
                    time.sleep(0.37 * ((i + offset) % 7))
                    t0 = time.monotonic()
                    r = api.post(f"{url}/api/v1/jobs", json=spec)
                    assert r.status_code == 201, r.text[:300]
                    job_id = r.json()["id"]
                    to_run.append(until({"job_id": job_id}, "Running") - t0)
                    t1 = time.monotonic()
                    r = api.post(f"{url}/api/v1/jobs/{job_id}/stop", json={})
                    assert r.status_code == 200, r.text[:300]
                    to_stop.append(until({"job_id": job_id}, "Stopped") - t1)
                    t2 = time.monotonic()
                    r = api.post(f"{url}/api/v1/jobs", json={**spec, "command": "sleep 0.3"})
                    assert r.status_code == 201, r.text[:300]
                    to_done.append(until({"job_id": r.json()["id"]}, "Succeeded") - t2)
            except Exception as exc:  # reported after the others finished
                errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                connection.close()

        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(f"{len(errors)} client(s) failed; first: {errors[0]}")
        rounds *= clients
        waking = settings.AGENT_WAIT_SLOTS > 0
        rows = [
            {
                "what": what,
                "rounds": rounds,
                "p50_s": round(common.median(values), 3),
                "p95_s": round(common.percentile(values, 95), 3),
                "max_s": round(max(values), 3),
            }
            for what, values in (
                ("submit -> Running", to_run),
                ("stop -> Stopped", to_stop),
                ("submit -> Succeeded (a 0.3 s worker)", to_done),
            )
        ]
        common.report(
            "wake",
            rows,
            quick=rounds < 60,
            waking=waking,
            targets={"submit_to_running_p95_s": 1.0},
            notes=f"embedded default (threaded server, in-process loops) on PostgreSQL, a real "
            f"agent with heartbeat {settings.AGENT_HEARTBEAT_INTERVAL} s, waking "
            f"{'on' if waking else 'off'}; {clients} client(s) at once; submits at varying "
            "points of the heartbeat cycle",
            clients=clients,
        )
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(30)
        stop_loops()
        httpd.shutdown()
        from agents import wake

        if wake._watcher is not None:
            wake._watcher.close()
        connection.close()  # the server threads' connections go with DROP … WITH (FORCE)


if __name__ == "__main__":
    main()
