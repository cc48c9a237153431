"""A fleet of agents against the production stack: N nodes x 8 fake GPUs heartbeating over
the real agent protocol to gunicorn, with the scheduler cycle in a Celery worker and beat
(Redis) on PostgreSQL, while `--jobs` jobs wait in the queue.

    .venv/bin/python -m bench.fleet             # quick: 50 nodes, 500 queued jobs, 30 s
    .venv/bin/python -m bench.fleet --full      # 200, 1,000, 2,000 nodes, 10,000 jobs, 120 s

Each node is a real `agents.node.agent.Agent` (protocol client, ledger and workers.json
journal, log shipper, waker; `simulated` runtime, fake GPUs), as threads in several fleet
processes; lighter than `python -m agents.node` only in its state dir on tmpfs and one timer
thread per process for the simulated workers. Starts are spread so heartbeats arrive evenly.
Workload: a "backlog" quota of capacity - RESERVE GPUs gets that many 1-GPU jobs that run for
hours (the cluster is full, each heartbeat reports 8 workers) plus `--jobs` that stay queued;
a "probe" quota of RESERVE GPUs gets a short job each second of the steady window.

Over the steady window: heartbeats/s offered (N / interval) and achieved, their client-side
latency p50/p95/p99 (AgentClient.heartbeat), wait/ and logs/ calls/s; the scheduler cycle
(each cycle's, as it counts itself: count, mean, longest, the share of the window the
scheduler was busy; and the Celery tasks, which run up to 20 cycles each, their longest
seen); probes' submit -> Running p95 (created_at ->
started_at); cores used by gunicorn, Celery (worker + beat), the database's PostgreSQL
backends, the fleet, and the machine's busy share; RSS of gunicorn and Celery; nodes seen
NotReady once all were Ready. Targets at 2,000 nodes, 5 s heartbeat (400/s): p95 <= 200 ms,
cycle <= 1 s, none NotReady. The load generator shares the machine: the note says when the
achieved rate falls short of the offered one or the machine is busy.
"""

import argparse
import contextlib
import heapq
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.cpu import cpu_figures, cpu_snapshot  # noqa: E402
from bench.load import Client  # noqa: E402

GPUS = 8
RESERVE = 16  # probe quota GPUs
LONG_RUN = 86_400  # backlog jobs' SIM_RUN_SECONDS
PROBE_RUN = 5
REGISTER_RATE = 100.0  # agents started per second at most
REDIS_URL = os.environ.get("BENCH_FLEET_REDIS_URL", "redis://127.0.0.1:6379/13")
WORK = ROOT / "var" / "bench-fleet"
ROW_MARK = "FLEET_ROW "


class SharedTimers:
    """One thread firing every simulated worker's end in this process (not one each)."""

    def __init__(self) -> None:
        self._heap: list = []
        self._cond = threading.Condition()
        self._seq = 0
        threading.Thread(target=self._run, name="sim-timers", daemon=True).start()

    def add(self, seconds: float, fn, *args) -> "_Handle":
        handle = _Handle()
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (time.monotonic() + seconds, self._seq, handle, fn, args))
            self._cond.notify()
        return handle

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _, _, handle, fn, args = heapq.heappop(self._heap)
            if not handle.is_set():
                fn(*args)


class _Handle(threading.Event):
    cancel = threading.Event.set


def make_agent(cfg: dict, index: int, rec: dict[str, list], timers: SharedTimers):
    """A real Agent (`--runtime simulated --fake-gpus 8xH200`), timed client, shared timers."""
    from agents.node.agent import Agent, AgentConfig
    from agents.node.client import AgentClient
    from agents.node.ledger import Ledger
    from agents.node.runtimes.base import SourceLines
    from agents.node.runtimes.simulated import SimulatedRuntime, _Simulated, exit_code, run_seconds

    class Runtime(SimulatedRuntime):
        def launch(self, spec) -> None:  # SimulatedRuntime.launch with a shared timer
            seconds, code = run_seconds(spec.env), exit_code(spec.env)
            worker = _Simulated(
                pod_id=spec.pod_id, attempt=spec.attempt, gpu_indices=spec.gpu_indices,
                gpu_uuids=spec.gpu_uuids, lines=SourceLines(spec.pod_id, self._on_line),
            )  # fmt: skip
            worker.ends_at = self._clock() + seconds
            self._add(worker)
            worker.lines(f"simulated worker: rank {spec.rank}/{spec.world_size}, {seconds:g} s")
            worker.timer = timers.add(seconds, self._end, worker, code)

    class TimedClient(AgentClient):
        def copy(self) -> "TimedClient":
            return TimedClient(self.server, token=self.token, timeout=self.timeout, stop=self._stop)

        def heartbeat(self, hb, *, attempts: int | None = 2):
            sent, t = time.time(), time.perf_counter()
            try:
                reply = super().heartbeat(hb, attempts=attempts)
            except Exception as exc:
                rec["beats"].append((sent, time.perf_counter() - t, repr(exc)[:200]))
                raise
            rec["beats"].append((sent, time.perf_counter() - t, ""))
            return reply

        def wait(self, req):
            reply = super().wait(req)
            rec["waits"].append((time.time(), reply.retry_after is not None))
            return reply

        def send_logs(self, batch, *, attempts: int | None = 1):
            rec["logs"].append((time.time(), False))
            return super().send_logs(batch, attempts=attempts)

    config = AgentConfig(
        server=cfg["server"], name=f"fleet-{index:05d}",
        state_dir=Path(cfg["state"]) / f"node-{index}", runtime="simulated",
        bootstrap_token=cfg["boot"], fake_gpus=f"{GPUS}xH200", cpus=256, memory_gb=2048,
        heartbeat_interval=cfg["interval"],
    )  # fmt: skip
    agent = Agent(config)
    agent.runtime = Runtime(agent.shipper.append, agent._on_exit)
    agent.ledger = Ledger(agent.store, agent.runtime)
    agent.client.close()
    agent.client = TimedClient(config.server, stop=agent.stop)
    return agent


def fleet_process(cfg: dict) -> None:
    """Start this process's agents at their offsets; on SIGTERM write what was recorded."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.stack_size(512 * 1024)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    # (sent wall time, seconds, error) of each heartbeat; (wall time, flag) of other calls
    rec: dict[str, list] = {"beats": [], "waits": [], "logs": []}
    timers = SharedTimers()
    started = 0
    for index, offset in cfg["agents"]:
        if stop.wait(max(0.0, cfg["t0"] + offset - time.time())):
            break
        agent = make_agent(cfg, index, rec, timers)
        threading.Thread(target=agent.run, name=f"agent-{index}", daemon=True).start()
        started += 1
    stop.wait()
    Path(cfg["out"]).write_text(json.dumps({"started": started, **rec}))
    os._exit(0)  # no final heartbeats: the measurement is over


# -- the console side -----------------------------------------------------------------------
def rss_mb(pid: int) -> float:
    """VmRSS of a process and its descendants."""
    kb = 0
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{pid}/status").read_text()
        kb = next((int(ln.split()[1]) for ln in status.splitlines() if ln[:6] == "VmRSS:"), 0)
    return kb / 1024 + sum(rss_mb(c) for c in common.children(pid))


class Sampler(threading.Thread):
    """Every second: nodes not Ready, the scheduler's LoopRun, the console's RSS."""

    def __init__(self, rss_pids: dict[str, list[int]]) -> None:
        super().__init__(daemon=True)
        self.rss_pids = rss_pids
        self.stop = threading.Event()
        self.not_ready: set[str] = set()
        self.cycles: list[tuple[float, float]] = []  # (wall time, last_seconds) of runs seen
        self.rss: dict[str, float] = {}

    def run(self) -> None:
        from django.db import connection

        from cluster.models import Node
        from console.models import LoopRun

        seen_runs = -1
        while not self.stop.wait(1.0):
            self.not_ready.update(
                Node.objects.exclude(state="Ready").values_list("name", flat=True)
            )
            loop = LoopRun.objects.filter(name="scheduler").first()
            if loop is not None and loop.runs != seen_runs:
                if seen_runs >= 0:
                    self.cycles.append((time.time(), loop.last_seconds))
                seen_runs = loop.runs
            for name, group in self.rss_pids.items():
                self.rss[name] = max(self.rss.get(name, 0.0), sum(map(rss_mb, group)))
        connection.close()


def fixtures(capacity: int):
    from django.contrib.auth import get_user_model

    from accounts.actions import issue_api_token
    from agents.actions import issue_bootstrap_token
    from quotas.models import Membership, Quota, ResourceType, Tenant, Workspace

    tenant = Tenant.objects.create(name="fleet")
    workspace = Workspace.objects.create(tenant=tenant, name="fleet")
    for name, gpus in (("backlog", capacity - RESERVE), ("probe", RESERVE)):
        quota = Quota.objects.create(
            tenant=tenant, name=name, resource_type=ResourceType.LINGJUN, gpu_type="H200",
            gpus=gpus,
        )  # fmt: skip
        workspace.quotas.add(quota)
    user = get_user_model().objects.create(username="fleet")
    Membership.objects.create(workspace=workspace, user=user)
    _, token = issue_api_token(user)
    _, boot = issue_bootstrap_token(None, "fleet bench", single_use=False)
    return token, boot


def job_spec(quota: str, seconds: float) -> dict:
    return {
        "quota": quota, "name": quota, "image": "simulated", "command": "simulated",
        "workers": 1, "gpus_per_worker": 1, "cpus_per_worker": 1, "memory_gb_per_worker": 1,
        "env": {"SIM_RUN_SECONDS": str(seconds)},
    }  # fmt: skip


def submit(base: str, token: str, count: int, stop: threading.Event | None, ids, errors):
    """The backlog (`count` jobs, arrays of 1,000); then one probe job each second until
    `stop` (`ids`, `errors`)."""
    client, headers = Client(base), {"Authorization": f"Bearer {token}"}
    for n in [1000] * (count // 1000) + [count % 1000] * bool(count % 1000):
        body = {"count": n, "job": job_spec("backlog", LONG_RUN)}
        status, reply = client.json("POST", "/api/v1/jobs/array", body, headers)
        if status != 201:
            raise RuntimeError(f"submitting the backlog: {status} {str(reply)[:300]}")
    while stop is not None and not stop.wait(1.0):
        status, reply = client.json("POST", "/api/v1/jobs", job_spec("probe", PROBE_RUN), headers)
        if status == 201:
            ids.append(reply["id"])
        else:
            errors.append(f"{status} {str(reply)[:200]}")


def wait_until(what: str, check, timeout: float) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{what}: not reached in {timeout:.0f} s (see {WORK})")
        time.sleep(0.5)
    return time.monotonic() - t0


def start_console(stack, env: dict, args) -> tuple[str, dict[str, list[int]]]:
    """gunicorn, Celery worker and beat, as docker-compose runs them; their pids."""
    from bench.kueue import process

    base, web = stack.enter_context(common.gunicorn(env, workers=args.web_workers))
    celery = [common.PYTHON, "-m", "celery", "-A", "console"]
    pids = []
    for what, extra in (("worker", ["--concurrency", str(args.celery)]),
                        ("beat", ["--schedule", str(WORK / "beat")])):  # fmt: skip
        cmd = [*celery, what, "--loglevel", "WARNING", *extra]
        pids.append(stack.enter_context(process(cmd, env, WORK / f"{what}.log")).pid)
    return base, {"web": [web], "celery": pids}


def start_fleet(stack, base: str, boot: str, args) -> list[tuple[subprocess.Popen, Path]]:
    """`procs` fleet processes; agent i starts at i x ramp / N (round-robin over them)."""
    n, procs = args.size, args.procs or max(1, min(8, -(-args.size // 250)))
    ramp = max(args.heartbeat, n / REGISTER_RATE)
    t0 = time.time() + 3.0
    state = Path("/dev/shm") / f"bench-fleet-{os.getpid()}"
    stack.callback(subprocess.run, ["rm", "-rf", str(state)], check=False)
    fleet = []
    for k in range(procs):
        cfg = {
            "server": base, "boot": boot, "interval": args.heartbeat, "state": str(state),
            "t0": t0, "out": str(WORK / f"fleet-{k}.json"),
            "agents": [(i, i * ramp / n) for i in range(k, n, procs)],
        }  # fmt: skip
        log = stack.enter_context((WORK / f"fleet-{k}.log").open("wb"))
        proc = subprocess.Popen(
            [common.PYTHON, "-m", "bench.fleet", "--fleet-process", json.dumps(cfg)],
            cwd=ROOT, env=os.environ | {"LOG_LEVEL": "WARNING"}, stdout=log, stderr=log,
        )  # fmt: skip
        stack.callback(lambda p=proc: p.poll() is None and p.kill())
        fleet.append((proc, Path(cfg["out"])))
    return fleet


def collect(fleet: list[tuple[subprocess.Popen, Path]]) -> dict:
    total: dict = {"started": 0, "beats": [], "waits": [], "logs": []}
    for proc, _ in fleet:
        proc.terminate()
    for proc, out in fleet:
        proc.wait(timeout=60)
        for key, value in json.loads(out.read_text()).items():
            total[key] += value
    return total


def run_size(args) -> dict:
    """One size on a database, Redis, stack and fleet of its own: its row."""
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    WORK.mkdir(parents=True, exist_ok=True)
    n, capacity = args.size, args.size * GPUS
    with common.clean_database(f"fleet_{n}") as url:
        common.setup_django(url)
        from django.db import connection

        from cluster.models import Node
        from jobs.models import Job, Pod

        token, boot = fixtures(capacity)
        env = common.bench_env(
            url, REDIS_URL=REDIS_URL, CONSOLE_LOOPS="celery",
            AGENT_HEARTBEAT_INTERVAL=str(max(1, round(args.heartbeat))),
            # Direct to gunicorn (no proxy in front): room for every agent's keep-alives.
            GUNICORN_CMD_ARGS=f"--worker-connections {max(1000, 4 * n // args.web_workers)}",
        )  # fmt: skip
        if args.scheduler_interval:
            env["SCHEDULER_INTERVAL"] = str(args.scheduler_interval)
        with contextlib.ExitStack() as stack:
            base, pids = start_console(stack, env, args)
            fleet = start_fleet(stack, base, boot, args)
            pids["fleet"] = [p.pid for p, _ in fleet]
            ready = Node.objects.filter(state="Ready")
            up = wait_until("nodes Ready", lambda: ready.count() >= n, 60 + n / 10)
            sampler = Sampler({k: v for k, v in pids.items() if k != "fleet"})
            sampler.start()
            fill, t_fill = capacity - RESERVE, time.monotonic()
            submit(base, token, fill + args.jobs, None, [], [])
            running = Pod.objects.filter(status="Running")
            wait_until("backlog Running", lambda: running.count() >= fill, 120 + n / 5)
            fill_s = time.monotonic() - t_fill
            print(f"{n} nodes Ready in {up:.0f} s; {fill:,} pods Running in {fill_s:.0f} s")
            queued = Job.objects.filter(status__in=["Pending", "Inqueue"]).count()
            row = steady(args, base, token, pids, connection.settings_dict["NAME"], sampler)
            row |= heartbeat_figures(collect(fleet), row.pop("window"), n / args.heartbeat)
        probes = Job.objects.filter(id__in=row.pop("probe_ids"))
        times = probes.values_list("created_at", "started_at")
        to_running = [(s - c).total_seconds() for c, s in times if s]
    return {
        "nodes": n, "gpus": capacity, "queued": queued, "fill_s": round(fill_s, 1), **row,
        "probes_not_running": row["probes"] - len(to_running),
        "submit_running_p95_s": round(common.percentile(to_running, 95), 2),
        "not_ready": len(sampler.not_ready),
        **{f"{k}_rss_mb": round(v) for k, v in sampler.rss.items()},
    }  # fmt: skip


def steady(args, base: str, token: str, pids: dict, database: str, sampler: Sampler) -> dict:
    """The steady window: probes submitted each second; CPU and cycles over the window."""
    stop, ids, errors = threading.Event(), [], []
    prober = threading.Thread(target=submit, args=(base, token, 0, stop, ids, errors))
    from console.models import LoopRun
    from jobs.scheduler import figures

    # Each cycle's own figures (jobs.scheduler.figures): a Celery task runs up to
    # coalesce.MAX_ROUNDS cycles back to back, so the LoopRun's (a task's) is not a cycle's.
    loop = LoopRun.objects.filter(name="scheduler").values_list("runs", "seconds_total")
    tasks0, _ = loop.first() or (0, 0.0)
    f0 = figures.read(REDIS_URL, reset_longest=True)
    cpu0, w0 = cpu_snapshot(pids, database), time.time()
    prober.start()
    time.sleep(args.duration)
    cpu1, w1 = cpu_snapshot(pids, database), time.time()
    f1 = figures.read(REDIS_URL)
    tasks1, _ = loop.first() or (0, 0.0)
    stop.set()
    prober.join()
    time.sleep(args.heartbeat + 1)  # the last probes' Running reports
    sampler.stop.set()
    sampler.join()
    cycles = f1.get("cycles", 0) - f0.get("cycles", 0)
    seconds = f1.get("seconds", 0) - f0.get("seconds", 0)
    in_window = [s for at, s in sampler.cycles if w0 <= at <= w1]
    return {
        "window": (w0, w1), "probe_ids": list(ids), "probes": len(ids),
        "probe_errors": len(errors), "cycles": int(cycles),
        "cycle_mean_ms": round(1000 * seconds / max(1, cycles), 1),
        "cycle_max_ms": round(1000 * f1.get("longest", 0.0), 1),
        "scheduler_busy_pct": round(100 * seconds / (w1 - w0), 1),
        "tasks": tasks1 - tasks0, "task_max_ms": round(1000 * max(in_window, default=0.0), 1),
        **cpu_figures(cpu0, cpu1, w1 - w0),
    }  # fmt: skip


def heartbeat_figures(recorded: dict, window: tuple[float, float], offered: float) -> dict:
    (lo, hi), pct = window, common.percentile
    span = hi - lo
    beats = [b for b in recorded["beats"] if lo <= b[0] < hi]
    ok = [1000 * b[1] for b in beats if not b[2]]
    waits = [w for w in recorded["waits"] if lo <= w[0] < hi]
    logs = [c for c in recorded["logs"] if lo <= c[0] < hi]
    return {
        "agents": recorded["started"], "hb_offered_per_s": round(offered, 1),
        "hb_per_s": round(len(beats) / span, 1), "hb_failed": len(beats) - len(ok),
        "hb_p50_ms": round(pct(ok, 50), 1), "hb_p95_ms": round(pct(ok, 95), 1),
        "hb_p99_ms": round(pct(ok, 99), 1), "waits_per_s": round(len(waits) / span, 1),
        "waits_no_slot": sum(1 for w in waits if w[1]), "logs_per_s": round(len(logs) / span, 1),
    }  # fmt: skip


def notes(rows: list[dict], args) -> str:
    parts = [
        f"{args.heartbeat:g} s heartbeat, {args.web_workers} gunicorn workers x 4 threads, Celery"
        f" worker ({args.celery}) + beat; load generator on the same {os.cpu_count()} CPUs"
    ]
    parts += [f"{r['nodes']} nodes NOT MEASURED: {r['not_reached']}" for r in rows if "failed" in r]
    rows = [r for r in rows if "failed" not in r]
    for row in rows:
        if row["hb_per_s"] < 0.95 * row["hb_offered_per_s"] or row["machine_busy_pct"] >= 80:
            parts.append(
                f"LOAD GENERATOR/MACHINE BOUND at {row['nodes']} nodes: {row['hb_per_s']}/s of "
                f"{row['hb_offered_per_s']}/s offered, machine {row['machine_busy_pct']} % busy"
                f" (fleet {row['fleet_cores']} cores): not the console's limit alone"
            )
    keys = ("hb_p95_ms", "cycle_mean_ms", "web_cores", "postgres_cores", "web_rss_mb")
    for first, row in ((rows[0], r) for r in rows[1:]):
        grow = ", ".join(f"{k} x{row[k] / first[k]:.2f}" for k in keys if first.get(k))
        parts.append(f"{first['nodes']} -> {row['nodes']} nodes: {grow}")
    return "; ".join(parts)


def run_sizes(sizes: list[int], argv: list[str]) -> list[dict]:
    """Each size in a process of its own (a database each, from one template)."""
    env = os.environ | {"BENCH_TEMPLATE": common.template()}
    rows = []
    for size in sizes:
        cmd = [common.PYTHON, "-m", "bench.fleet", *argv, "--size", str(size)]
        why = ""  # the size's own account of a failure (its last exception line)
        out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
        with subprocess.Popen(cmd, cwd=ROOT, env=env, **out) as proc:
            for line in proc.stdout:
                if not line.startswith(ROW_MARK):
                    print(line, end="", flush=True)
                    why = line.strip() if line[:1].isupper() and "Error: " in line else why
                else:
                    rows.append(json.loads(line.removeprefix(ROW_MARK)))
        if proc.returncode:
            print(f"{size} nodes: failed (exit {proc.returncode}); see {WORK}", file=sys.stderr)
            rows.append({"nodes": size, "failed": proc.returncode, "not_reached": why[:300]})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--full", action="store_true", help="200,1000,2000 nodes, 10,000 jobs")
    add("--nodes", help="comma-separated sizes (default 50; --full 200,1000,2000)")
    add("--jobs", type=int, help="queued jobs (default 500; --full 10,000)")
    add("--heartbeat", type=float, default=5.0, help="seconds (default 5)")
    add("--duration", type=float, help="steady window, s (default 30; --full 120)")
    add("--web-workers", type=int, default=4, help="gunicorn workers (default 4)")
    add("--celery", type=int, default=2, help="Celery worker concurrency (default 2)")
    add("--procs", type=int, help="fleet processes (default N/250, 1 to 8)")
    add("--scheduler-interval", type=int, help="beat's tick (default the console's, 5 s)")
    add("--size", type=int, help=argparse.SUPPRESS)
    add("--fleet-process", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fleet_process:
        return fleet_process(json.loads(args.fleet_process))
    args.jobs = args.jobs if args.jobs is not None else (10_000 if args.full else 500)
    args.duration = args.duration or (120 if args.full else 30)
    if args.size:
        return print(ROW_MARK + json.dumps(run_size(args)), flush=True)
    sizes = [int(s) for s in (args.nodes or ("200,1000,2000" if args.full else "50")).split(",")]
    rows = run_sizes(sizes, argv if argv is not None else sys.argv[1:])
    common.report(
        "fleet", rows, quick=not args.full, notes=notes(rows, args),
        heartbeat=args.heartbeat, jobs=args.jobs, duration=args.duration,
        targets={"nodes": 2000, "hb_per_s": 400, "hb_p95_ms": 200, "cycle_ms": 1000,
                 "not_ready": 0},
    )  # fmt: skip
    return None


if __name__ == "__main__":
    main()
