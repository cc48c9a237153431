"""CPU time and SQL statements per call on the two hottest write paths, in this process
(Django's test client: no HTTP, no server), on a clean PostgreSQL database:

- a single `POST /api/v1/jobs` (each adds a Pending job; the scheduler does not run), and
- an agent heartbeat where nothing changed (8 GPUs, N running workers reported as known),
- a busy node's heartbeat: 60 running workers each reporting a new progress step, so every
  call takes the full path (the shape of bench/kueue.py's 60-GPU agents, without exits),
- a heartbeat in which 20 one-worker jobs exit 0, each job then Completed, each exit's last
  log line riding with it (bench/kueue.py's agents send such a heartbeat every few hundred
  milliseconds; its commit starts the cycle that places the next pods, so its time is in
  every GPU handover),
- a log request with 20 workers' first lines (their start, in bench/kueue.py). Each call's
  running jobs are made before it, outside the measure.

    .venv/bin/python -m bench.percall            # quick: 300 submits, 3 x 1,000 heartbeats
    .venv/bin/python -m bench.percall --full     # 2,000 submits, 3 x 5,000 heartbeats
    .venv/bin/python -m bench.percall --profile  # and a cProfile summary of each path

Statement counts are also asserted by tests (tests/api, tests/agents); this measures what
they cost. Through a real server see bench.throughput (adds gunicorn and HTTP).
"""

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

SPEC = {"quota": "q", "image": "busybox", "command": "train", "gpus_per_worker": 1}


def statements_of(call: Callable[[], None]) -> list[str]:
    from django.db import connection

    seen: list[str] = []

    def capture(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        call()
    return seen


def timed(call: Callable[[], None], calls: int, repeat: int) -> tuple[float, float]:
    """Median CPU ms and wall ms per call over `repeat` runs of `calls` calls. A call with a
    `prepare` attribute has it run before each call, outside the measure."""
    prepare = getattr(call, "prepare", None)
    cpu, wall = [], []
    for _ in range(repeat):
        spent_cpu = spent_wall = 0.0
        for _ in range(calls):
            if prepare is not None:
                prepare()
            c0, w0 = time.process_time(), time.perf_counter()
            call()
            spent_cpu += time.process_time() - c0
            spent_wall += time.perf_counter() - w0
        cpu.append(spent_cpu / calls * 1000)
        wall.append(spent_wall / calls * 1000)
    return common.median(cpu), common.median(wall)


def profile(call: Callable[[], None], calls: int) -> None:
    import cProfile
    import pstats

    prepare = getattr(call, "prepare", lambda: None)
    profiler = cProfile.Profile()
    for _ in range(calls):
        prepare()
        profiler.runcall(call)
    pstats.Stats(profiler).sort_stats("cumtime").print_stats(30)


BUSY_WORKERS = 60
EXITS = 20  # one-worker jobs ending in one heartbeat


def _facts(gpus: int, hostname: str) -> dict:
    return {
        "hostname": hostname, "agent_version": "0.1.0", "runtime": "process",
        "resource_type": "Lingjun", "gpu_type": "H200", "cpus": 96, "memory_gb": 1024,
        "gpus": [
            {"index": i, "uuid": f"GPU-{hostname}{i:04d}", "name": "NVIDIA H200",
             "memory_total_mb": 143771}
            for i in range(gpus)
        ],
    }  # fmt: skip


def _node_with_running(client, researcher, name: str, facts: dict, count: int):
    """A registered node (its token) running one job of `count` one-GPU workers (its pods).
    `researcher`: common.researcher_with_quota()."""
    from agents.actions import issue_bootstrap_token
    from jobs.models import Job, Pod
    from policy.statuses import JobStatus, PodStatus

    user, workspace, quota, _ = researcher
    _, bootstrap = issue_bootstrap_token(None, "bench")
    r = client.post(
        "/api/v1/agent/register/",
        json.dumps({"name": name, "facts": facts}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {bootstrap}"},
    )
    node_id, node_token = r.json()["node_id"], r.json()["node_token"]
    job = Job.objects.create(
        workspace=workspace, quota=quota, owner=user, name=f"running on {name}", image="i",
        command="c", workers=count, gpus_per_worker=1, status=JobStatus.RUNNING,
    )  # fmt: skip
    pods = [
        Pod.objects.create(
            job=job,
            attempt=1,
            rank=r,
            node_id=node_id,
            gpu_indices=[r],
            gpus=1,
            charged_quota=quota,
            status=PodStatus.RUNNING,
        )
        for r in range(count)
    ]
    return node_token, pods


def _twenty(client, researcher, name: str, log_next_seq: int):
    """A 60-GPU node's facts and token, and a maker of EXITS running one-worker jobs on it
    (their pods, log sequences at `log_next_seq`), for a path's `prepare`."""
    from jobs.models import Job, Pod
    from policy.statuses import JobStatus, PodStatus

    user, workspace, quota, _ = researcher
    facts = _facts(BUSY_WORKERS, name[0])
    token, pods = _node_with_running(client, researcher, name, facts, 1)
    node_id = pods[0].node_id
    Job.objects.filter(pk=pods[0].job_id).update(status=JobStatus.COMPLETED)
    Pod.objects.filter(pk=pods[0].pk).update(status=PodStatus.SUCCEEDED)

    def made() -> list:
        pods = []
        for index in range(EXITS):
            job = Job.objects.create(
                workspace=workspace, quota=quota, owner=user, name=name, image="i",
                command="c", workers=1, gpus_per_worker=1, status=JobStatus.RUNNING,
            )  # fmt: skip
            pods.append(Pod.objects.create(
                job=job, attempt=1, rank=0, node_id=node_id, gpu_indices=[index], gpus=1,
                charged_quota=quota, status=PodStatus.RUNNING, log_next_seq=log_next_seq,
            ))  # fmt: skip
        return pods

    return facts, token, made


def _exits(client, researcher) -> Callable[[], None]:
    """A heartbeat of a 60-GPU node whose EXITS one-worker jobs exit 0, each with its last
    log line riding (bench/kueue.py's simulated workers: a line when they start, shipped on
    its own, and one when they end, with the exit); each call's jobs are made by its
    `prepare`."""
    facts, token, made = _twenty(client, researcher, "exits", 1)
    bodies: list[str] = []

    def prepare() -> None:
        pods = made()
        workers = [
            {"pod_id": p.pk, "attempt": 1, "state": "exited", "exit_code": 0,
             "container_id": f"c{p.pk}", "logs_delivered": True}
            for p in pods
        ]  # fmt: skip
        logs = [
            {"pod_id": p.pk, "attempt": 1, "first_seq": 1, "end": True,
             "lines": ["simulated worker: done, exit 0"]}
            for p in pods
        ]  # fmt: skip
        bodies.append(json.dumps({"facts": facts, "workers": workers, "logs": logs}))

    def exits_heartbeat() -> None:
        if not bodies:
            prepare()
        reply = _post(client, "/api/v1/agent/heartbeat/", bodies.pop(), token)
        assert not reply["refused"] and not reply["run"], reply
        assert len(reply["logs"]["acks"]) == EXITS and not reply["logs"]["refused"], reply

    exits_heartbeat.prepare = prepare  # type: ignore[attr-defined]
    return exits_heartbeat


def _first_lines(client, researcher) -> Callable[[], None]:
    """A log request of EXITS workers' first lines (`POST /api/v1/agent/logs/`: the lines
    the simulated workers print when they start)."""
    from jobs.models import Pod
    from policy.statuses import PodStatus

    _, token, made = _twenty(client, researcher, "starts", 0)
    bodies: list[str] = []
    earlier: list[int] = []

    def prepare() -> None:
        # The last call's workers end first (outside the measure): their GPUs are free again.
        Pod.objects.filter(pk__in=earlier).update(status=PodStatus.SUCCEEDED)
        pods = made()
        earlier[:] = [p.pk for p in pods]
        batches = [
            {"pod_id": p.pk, "attempt": 1, "first_seq": 0,
             "lines": [f"simulated worker: rank 0/1, {p.pk} s"]}
            for p in pods
        ]  # fmt: skip
        bodies.append(json.dumps({"batches": batches}))

    def first_lines() -> None:
        if not bodies:
            prepare()
        reply = _post(client, "/api/v1/agent/logs/", bodies.pop(), token)
        assert len(reply["acks"]) == EXITS and not reply["refused"], reply

    first_lines.prepare = prepare  # type: ignore[attr-defined]
    return first_lines


def _post(client, path: str, body: str, token: str, status: int = 200) -> dict:
    response = client.post(
        path, body, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == status, response.content[:300]
    return response.json()


def fixtures(workers: int) -> tuple[Callable[[], None], ...]:
    """The submit, quiet heartbeat and busy heartbeat calls, each checked to succeed."""
    from django.test import Client

    researcher = common.researcher_with_quota()
    client = Client()
    facts = _facts(8, "h")
    node_token, pods = _node_with_running(client, researcher, "n1", facts, workers)
    heartbeat_body = json.dumps(
        {
            "facts": facts,
            "workers": [
                {"pod_id": p.pk, "attempt": 1, "state": "running", "container_id": f"c{p.pk}"}
                for p in pods
            ],
        }
    )
    busy_facts = _facts(BUSY_WORKERS, "b")
    busy_token, busy_pods = _node_with_running(client, researcher, "busy", busy_facts, BUSY_WORKERS)
    # STEP is replaced by the call's number: a new body each time (never the quiet path).
    progress = {"step": 123456789, "total": 10**12, "metrics": {"loss": 0.5}}
    busy_template = json.dumps(
        {
            "facts": busy_facts,
            "workers": [
                {"pod_id": p.pk, "attempt": 1, "state": "running", "container_id": f"c{p.pk}",
                 "progress": progress}
                for p in busy_pods
            ],
        }
    ).replace("123456789", "STEP")  # fmt: skip
    busy_calls = iter(range(1, 10**9))
    submit_body = json.dumps(SPEC)
    api_token = researcher[3]

    def submit() -> None:
        _post(client, "/api/v1/jobs", submit_body, api_token, status=201)

    def heartbeat() -> None:
        _post(client, "/api/v1/agent/heartbeat/", heartbeat_body, node_token)

    def busy_heartbeat() -> None:
        body = busy_template.replace("STEP", str(next(busy_calls)))
        assert not _post(client, "/api/v1/agent/heartbeat/", body, busy_token)["refused"]

    return (
        submit,
        heartbeat,
        busy_heartbeat,
        _exits(client, researcher),
        _first_lines(client, researcher),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--workers", type=int, default=8, help="running workers per heartbeat")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    submits, beats = (2000, 5000) if args.full else (300, 1000)
    rows = []
    with common.clean_database("percall") as url:
        common.setup_django(url)
        logging.getLogger("console.access").setLevel(logging.WARNING)
        submit, heartbeat, busy_heartbeat, exits_heartbeat, first_lines = fixtures(args.workers)
        paths = [
            ("POST /api/v1/jobs (one job)", submit, submits, 1, 5.0),
            (f"heartbeat, nothing changed ({args.workers} workers)", heartbeat, beats, 3, 1.0),
            (
                f"heartbeat, busy node ({BUSY_WORKERS} workers, new progress each)",
                busy_heartbeat,
                beats // 5,
                3,
                None,
            ),
            (
                f"heartbeat, {EXITS} one-worker jobs exit 0 (each Completed, its last line riding)",
                exits_heartbeat,
                beats // 20,
                3,
                None,
            ),
            (f"log lines, {EXITS} workers' first lines", first_lines, beats // 20, 3, None),
        ]
        for label, call, calls, repeat, target_ms in paths:
            call()  # warm: first-call imports and caches
            getattr(call, "prepare", lambda: None)()
            sql = statements_of(call)
            cpu, wall = timed(call, calls, repeat)
            if args.profile:
                profile(call, min(calls, 300))
            print(f"{label}: {len(sql)} statements")
            for text in sql:
                print("   ", text[:110])
            rows.append(
                {
                    "path": label,
                    "calls": calls * repeat,
                    "statements": len(sql),
                    "writes": sum(
                        1 for s in sql if s.lstrip().split()[0].upper() in {"INSERT", "UPDATE"}
                    ),
                    "cpu_ms": round(cpu, 2),
                    "wall_ms": round(wall, 2),
                    "target_cpu_ms": target_ms,
                }
            )
    common.report(
        "percall",
        rows,
        quick=not args.full,
        notes="in-process (Django test client, no HTTP) on PostgreSQL; CPU of this process "
        "only (PostgreSQL's own is not counted); targets: single submit <= 5 ms CPU, "
        "heartbeat with nothing changed 1 statement (>= 1,000/s per core needs <= 1 ms)",
    )


if __name__ == "__main__":
    main()
