"""Kueue's scheduler baseline (test/performance/scheduler/configs/baseline) through the whole
product: jobs submitted through the API to gunicorn, scheduled by the real cycle (Celery
worker and beat, Redis) on PostgreSQL, run by real agents with the `simulated` runtime (a
worker is a timer of the job's SIM_RUN_SECONDS: no process per worker).

Kueue: 5 cohorts x 6 ClusterQueues of nominal 20, borrowing in the cohort, reclaim and
priority preemption in the queue; per queue 350 small (1 unit, 200 ms, priority 50, one
every 100 ms), 100 medium (5 units, 500 ms, priority 100, one every 500 ms), 50 large
(20 units, 1 s, priority 200, one every 1.2 s). Published: 351 s in all; mean time to
admission large 6.7 s, medium 76.8 s, small 215.5 s; minimum queue usage 58.7 %.

Here: 5 Lingjun tenants x 6 quotas of 20 H200 (preemption LowerPriority), every job
Acceptable (may borrow idle GPUs of its tenant; reclaimed when the owner needs them) with
Automatic Fault Tolerance (a preempted job restarts, as Kueue requeues an evicted one).
Mapped where the product's rules differ: priorities 50/100/200 -> 1/2/3 (the product's
scale is 1-9); a large job is 4 workers x 5 GPUs (at most 8 GPUs per worker); nodes have
60 GPUs (10 agents for 600 GPUs). Jobs are submitted on Kueue's schedule through
`POST /api/v1/jobs/array` (each due group of one quota and class in one request; when the
API falls behind, the next request carries every job that came due meanwhile).

    .venv/bin/python -m bench.kueue            # quick: 1 tenant of 3 quotas (1,500 jobs)
    .venv/bin/python -m bench.kueue --full     # 5 tenants (30 quotas, 15,000 jobs)

Time to admission: from the job's creation in the console (and, second figure, from its
arrival on Kueue's schedule) to its first pod. Two usages over the run (first arrival to
last finish):
- `kueue_usage`, Kueue's own formula (its recorder: each ClusterQueue's admitted requests
  integrated over time, summed over the class of queues, / their nominal quota x the span):
  GPUs reserved by pods from placement (admission) to release, all quotas together, /
  (20 x quotas x span). Compare this one with Kueue's 58.7 %.
- `min_quota_usage`, stricter: GPU-seconds charged to the quota while its pods ran (started to
  finished, no turnover) / (20 x span), the least-served quota.
"""

import argparse
import contextlib
import itertools
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common, gputime  # noqa: E402
from bench.cpu import CpuSampler  # noqa: E402
from bench.load import Client  # noqa: E402


@dataclass(frozen=True)
class Klass:
    name: str
    count: int  # per quota
    interval: float  # seconds between arrivals
    workers: int
    gpus_per_worker: int
    seconds: float  # run time
    priority: int
    kueue_mean_admission: float


CLASSES = [
    Klass("small", 350, 0.1, 1, 1, 0.2, 1, 215.5),
    Klass("medium", 100, 0.5, 1, 5, 0.5, 2, 76.8),
    Klass("large", 50, 1.2, 4, 5, 1.0, 3, 6.7),
]
QUOTAS_PER_TENANT = 6
QUOTA_GPUS = 20
NODE_GPUS = 60
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")


@contextlib.contextmanager
def process(cmd: list[str], env: dict[str, str], log: Path):
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def fixtures(tenants: int, per_tenant: int) -> tuple[str, list[str]]:
    from django.contrib.auth import get_user_model

    from accounts.actions import issue_api_token
    from quotas.models import Membership, Quota, ResourceType, Tenant, Workspace

    user = get_user_model().objects.create(username="kueue")
    names = []
    for t in range(tenants):
        tenant = Tenant.objects.create(name=f"cohort-{t}")
        workspace = Workspace.objects.create(tenant=tenant, name=f"cohort-{t}")
        Membership.objects.create(workspace=workspace, user=user)
        for q in range(per_tenant):
            quota = Quota.objects.create(
                tenant=tenant,
                name=f"c{t}-q{q}",
                resource_type=ResourceType.LINGJUN,
                gpu_type="H200",
                gpus=QUOTA_GPUS,
                preemption="LowerPriority",
            )
            workspace.quotas.add(quota)
            names.append(quota.name)
    _, token = issue_api_token(user)
    return token, names


def submitter(
    base: str, token: str, keys: list[tuple[str, Klass]], t0: float, out: dict, errors: list
) -> None:
    """Submit each (quota, class)'s arrivals as they come due, as arrays."""
    client = Client(base)
    headers = {"Authorization": f"Bearer {token}"}
    sent = dict.fromkeys(keys, 0)
    while any(sent[k] < k[1].count for k in keys):
        now = time.monotonic() - t0
        idle = True
        for key in keys:
            quota, k = key
            due = min(k.count, int(now / k.interval) + 1)
            n = due - sent[key]
            if n <= 0:
                continue
            idle = False
            spec = {
                "quota": quota,
                "name": k.name,
                "image": "simulated",
                "command": "simulated",
                "workers": k.workers,
                "gpus_per_worker": k.gpus_per_worker,
                "cpus_per_worker": 1,
                "memory_gb_per_worker": 1,
                "priority": k.priority,
                "idle_resources": "Acceptable",
                # Kueue requeues an evicted workload; here a preempted job restarts
                # (Automatic Fault Tolerance), or it would end Preempted.
                "fault_tolerance": True,
                "env": {"SIM_RUN_SECONDS": str(k.seconds)},
            }
            status, body = client.json(
                "POST", "/api/v1/jobs/array", {"count": n, "job": spec}, headers
            )
            if status != 201:
                errors.append(f"{status} {str(body)[:300]}")
                time.sleep(0.5)
                continue
            for i, job in enumerate(body["jobs"]):
                out[job["id"]] = (k.name, t0 + (sent[key] + i) * k.interval)
            sent[key] = due
        if idle:
            time.sleep(0.02)


def _turnover(pods) -> dict:
    """Where a GPU's time goes between two workers (seconds, means over pods): admitted →
    Running (the agent hears of the pod, starts it, reports it), and a worker's end → the
    next pod placed on the same GPU (the exit report, the cycle, the reply)."""
    to_running, gaps = [], []
    by_gpu: dict[tuple, list] = defaultdict(list)
    for node, indices, made, started, finished in pods:
        if started:
            to_running.append((started - made).total_seconds())
        for index in indices or ():
            by_gpu[(node, index)].append((made, finished))
    for spans in by_gpu.values():
        spans.sort(key=lambda span: span[0])
        for (_, finished), (made, _) in itertools.pairwise(spans):
            if finished and made >= finished:
                gaps.append((made - finished).total_seconds())

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 3) if values else None

    return {
        "admitted_to_running_s": mean(to_running),
        "p95_admitted_to_running_s": round(common.percentile(to_running, 95), 3)
        if to_running
        else None,
        "gpu_idle_between_pods_s": mean(gaps),
        "p50_gpu_idle_between_pods_s": round(common.percentile(gaps, 50), 3) if gaps else None,
        "p90_gpu_idle_between_pods_s": round(common.percentile(gaps, 90), 3) if gaps else None,
        "gpu_handovers": len(gaps),
    }


def measure(tenants: int, per_tenant: int, agents: int, heartbeat: float, timeout: float) -> dict:
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    work = ROOT / "var" / "bench-kueue"
    work.mkdir(parents=True, exist_ok=True)
    with common.clean_database("kueue") as url:
        common.setup_django(url)
        from django.utils import timezone

        from agents.actions import issue_bootstrap_token
        from cluster.models import Node
        from console.models import LoopRun
        from jobs.models import Job, Pod
        from policy.statuses import FINAL_JOB_STATUSES, PodStatus

        token, quotas = fixtures(tenants, per_tenant)
        _, boot = issue_bootstrap_token(None, "kueue bench", single_use=False)
        env = common.bench_env(
            url,
            REDIS_URL=REDIS_URL,
            CONSOLE_LOOPS="celery",
            SCHEDULER_INTERVAL="1",
            AGENT_HEARTBEAT_INTERVAL=str(max(1, round(heartbeat))),
        )
        with contextlib.ExitStack() as stack:
            base, web = stack.enter_context(common.gunicorn(env))
            celery = [common.PYTHON, "-m", "celery", "-A", "console"]
            worker = stack.enter_context(
                process(
                    [*celery, "worker", "--loglevel", "WARNING", "--concurrency", "2"],
                    env,
                    work / "worker.log",
                )
            )
            beat = stack.enter_context(
                process(
                    [*celery, "beat", "--loglevel", "WARNING", "--schedule", str(work / "beat")],
                    env,
                    work / "beat.log",
                )
            )
            agent_pids = []
            agent_env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT_")}
            agent_env["GPU_AGENT_BOOTSTRAP_TOKEN"] = boot
            for i in range(agents):
                state = work / f"agent-{i}"
                subprocess.run(["rm", "-rf", str(state)], check=True)
                # BENCH_AGENT_PROFILE=<dir>: each agent's main loop under cProfile
                # (<dir>/agent-<i>.prof, written when the agent exits on SIGTERM).
                profile = os.environ.get("BENCH_AGENT_PROFILE", "")
                prof = ["-m", "cProfile", "-o", f"{profile}/agent-{i}.prof"] if profile else []
                agent = stack.enter_context(
                    process(
                        [
                            common.PYTHON,
                            *prof,
                            "-m",
                            "agents.node",
                            "--server",
                            base,
                            "--name",
                            f"kq-{i}",
                            "--state-dir",
                            str(state),
                            "--runtime",
                            "simulated",
                            "--fake-gpus",
                            f"{NODE_GPUS}xH200",
                            "--cpus",
                            "1000",
                            "--memory-gb",
                            "10000",
                            "--heartbeat-interval",
                            str(heartbeat),
                            "--log-level",
                            "WARNING",
                        ],
                        agent_env,
                        work / f"agent-{i}.log",
                    )
                )
                agent_pids.append(agent.pid)
            # Wait for the agents and for the Celery worker's first scheduler cycle (a busy
            # machine takes minutes to start a worker): the clock starts with a ready system.
            deadline = time.monotonic() + 300
            while (
                Node.objects.filter(state="Ready", gpus=NODE_GPUS).count() < agents
                or not LoopRun.objects.filter(name="scheduler", runs__gt=0).exists()
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("agents or Celery not up in 300 s (see var/bench-kueue/)")
                time.sleep(0.5)
            total_jobs = len(quotas) * sum(k.count for k in CLASSES)
            print(
                f"{agents} agents up; submitting {total_jobs} jobs to {len(quotas)} quotas",
                flush=True,
            )
            keys = [(q, k) for q in quotas for k in CLASSES]
            arrivals: dict[int, tuple[str, float]] = {}
            errors: list[str] = []
            threads = 4
            sampler = CpuSampler(
                {"web": [web], "worker": [worker.pid], "beat": [beat.pid], "agents": agent_pids},
                alone={"load": os.getpid()},
                database=url.rsplit("/", 1)[1],
            )
            sampler.start_window()
            t0 = time.monotonic()
            wall0 = timezone.now()
            subs = [
                threading.Thread(
                    target=submitter, args=(base, token, keys[i::threads], t0, arrivals, errors)
                )
                for i in range(threads)
            ]
            for s in subs:
                s.start()
            for s in subs:
                s.join()
            submitted_in = time.monotonic() - t0
            print(f"submitted in {submitted_in:.1f} s ({len(errors)} refused requests)", flush=True)
            end = t0 + timeout
            done = 0
            while time.monotonic() < end:
                done = Job.objects.filter(status__in=FINAL_JOB_STATUSES).count()
                if done >= total_jobs:
                    break
                time.sleep(1)
            total = time.monotonic() - t0
            cpu = sampler.stop()
        # -- figures from the database -------------------------------------------------
        # Where the time goes: what the loops did during the run (LoopRun, /metrics' source).
        loops = {
            r.name: {
                "runs": r.runs,
                "failures": r.failures,
                "mean_ms": round(1000 * r.seconds_total / r.runs, 1) if r.runs else None,
            }
            for r in LoopRun.objects.all()
        }
        created = dict(Job.objects.values_list("id", "created_at"))
        statuses = defaultdict(int)
        preemptions = 0
        for s, count in Job.objects.values_list("status", "preemption_count"):
            statuses[s] += 1
            preemptions += count
        first_pod: dict[int, object] = {}
        usage = defaultdict(float)
        held = 0.0  # Kueue's measure: GPUs reserved from admission (placement) to release
        last_finish = wall0
        klass = {k.name: k for k in CLASSES}
        spans = []
        for job_id, made, started, finished, gpus, charged, status in Pod.objects.values_list(
            "job_id", "created_at", "started_at", "finished_at", "gpus", "charged_quota_id",
            "status",
        ):  # fmt: skip
            done_work = status == PodStatus.SUCCEEDED and job_id in arrivals
            ran = klass[arrivals[job_id][0]].seconds if done_work else 0.0
            spans.append(gputime.PodSpan(gpus, made, finished, ran))
            if job_id not in first_pod or made < first_pod[job_id]:
                first_pod[job_id] = made
            if started and finished:
                usage[charged] += gpus * (finished - started).total_seconds()
            if finished:
                held += gpus * (finished - made).total_seconds()
                last_finish = max(last_finish, finished)
        span = (last_finish - wall0).total_seconds()
        turnover = _turnover(
            Pod.objects.values_list(
                "node_id", "gpu_indices", "created_at", "started_at", "finished_at"
            )
        )
        from quotas.models import Quota

        quota_ids = list(Quota.objects.values_list("id", flat=True))
        waits = [
            gputime.JobWait(
                klass[name].workers * klass[name].gpus_per_worker, created[i], first_pod.get(i)
            )
            for i, (name, _) in arrivals.items()
        ]
        account = gputime.account(spans, waits, NODE_GPUS * agents, wall0, last_finish)
        usages = [usage[q] / (QUOTA_GPUS * span) for q in quota_ids] if span > 0 else [0.0]
        kueue_usage = held / (QUOTA_GPUS * len(quota_ids) * span) if span > 0 else 0.0
        by_class: dict[str, list[float]] = defaultdict(list)
        by_class_arrival: dict[str, list[float]] = defaultdict(list)
        wall_of_t0 = wall0.timestamp()  # taken right after t0
        for job_id, (klass, arrival_mono) in arrivals.items():
            if job_id not in first_pod:
                continue
            admitted = first_pod[job_id].timestamp()
            by_class[klass].append(admitted - created[job_id].timestamp())
            by_class_arrival[klass].append(admitted - (wall_of_t0 + (arrival_mono - t0)))
    rows = []
    for k in CLASSES:
        values = by_class.get(k.name, [])
        rows.append(
            {
                "class": k.name,
                "jobs": len([1 for c, _ in arrivals.values() if c == k.name]),
                "admitted": len(values),
                "mean_admission_s": round(sum(values) / len(values), 2) if values else None,
                "p95_admission_s": round(common.percentile(values, 95), 2) if values else None,
                "mean_from_arrival_s": round(sum(by_class_arrival[k.name]) / len(values), 2)
                if values
                else None,
                "kueue_mean_s": k.kueue_mean_admission,
            }
        )
    return {
        "rows": rows,
        "total_seconds": round(total, 1),
        "submitted_in_seconds": round(submitted_in, 1),
        "jobs": total_jobs,
        "finished": done,
        "statuses": dict(statuses),
        "preemptions": preemptions,
        "loops": loops,
        "turnover": turnover,
        "gpu_time": account,
        "cpu": cpu,
        "min_quota_usage": round(min(usages), 3),
        "mean_quota_usage": round(sum(usages) / len(usages), 3),
        "kueue_usage": round(kueue_usage, 3),
        "refused_requests": len(errors),
        "first_refusal": errors[0] if errors else "",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="5 tenants, 15,000 jobs")
    parser.add_argument("--tenants", type=int, help="default 1 (quick), 5 (--full)")
    parser.add_argument("--quotas", type=int, help="per tenant: default 3 (quick), 6 (--full)")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="agent heartbeat, seconds")
    parser.add_argument(
        "--timeout", type=float, help="give up after, seconds (default 240 quick, 900 full)"
    )
    args = parser.parse_args(argv)
    tenants = args.tenants or (5 if args.full else 1)
    per_tenant = args.quotas or (QUOTAS_PER_TENANT if args.full else 3)
    timeout = args.timeout or (900 if args.full else 240)
    agents = max(1, -(-tenants * per_tenant * QUOTA_GPUS // NODE_GPUS))
    result = measure(tenants, per_tenant, agents, args.heartbeat, timeout)
    rows = result.pop("rows")
    t = result["turnover"]
    print(
        f"all final in {result['total_seconds']} s; usage by Kueue's formula "
        f"{result['kueue_usage']} (Kueue 0.587), min quota usage while running "
        f"{result['min_quota_usage']}; "
        f"admitted -> Running {t['admitted_to_running_s']} s (p95 "
        f"{t['p95_admitted_to_running_s']}); a GPU idles {t['gpu_idle_between_pods_s']} s "
        f"between two pods (p50 {t['p50_gpu_idle_between_pods_s']}, p90 "
        f"{t['p90_gpu_idle_between_pods_s']}; {t['gpu_handovers']} handovers)"
    )
    print(gputime.describe(result["gpu_time"]))
    c = result["cpu"]
    print(
        "cores used over the run: "
        + ", ".join(f"{k[:-6]} {v}" for k, v in c.items() if k.endswith("_cores"))
        + f"; machine {c['machine_busy_pct']} % busy of {c['cpus']} CPUs"
    )
    scale = ""
    if (tenants, per_tenant) != (5, QUOTAS_PER_TENANT):
        scale = (
            f"scaled down: {tenants} of Kueue's 5 cohorts, {per_tenant} of its 6 queues each "
            f"({result['jobs']:,} of 15,000 jobs); "
        )
    if result["finished"] < result["jobs"]:
        scale += f"NOT FINISHED: {result['finished']:,} jobs final after the {timeout:g} s limit; "
    common.report(
        "kueue",
        rows,
        quick=not args.full,
        notes=scale + f"{agents} agents x {NODE_GPUS} GPUs, heartbeat {args.heartbeat:g} s, "
        "Celery worker (2 processes) + beat (scheduler tick 1 s); admission from the job's "
        "creation in the console (from_arrival: from its arrival on Kueue's schedule)",
        tenants=tenants,
        quotas_per_tenant=per_tenant,
        agents=agents,
        # Issue 22's numbers: all final in 120 s full (stretch 90), 40 s quick; each class's
        # mean admission below Kueue's; minimum quota usage at least Kueue's.
        targets={
            "total_seconds": 120 if args.full else 40,
            "min_quota_usage": 0.587,
            "kueue_usage": 0.587,
            "kueue_total_seconds": 351,
            "kueue_min_queue_usage": 0.587,
        },
        **result,
    )


if __name__ == "__main__":
    main()
