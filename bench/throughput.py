"""Submissions and heartbeats per second through a real gunicorn (gthread, the production
config deploy/gunicorn.conf.py: 4 workers x 4 threads) on a clean PostgreSQL database, with
the CPU time per request of gunicorn's processes and of the PostgreSQL backends serving it,
and a trivial view (`/healthz`: one `SELECT 1`) in the same run as the baseline.

    .venv/bin/python -m bench.throughput            # quick: 1 round of 4 s per path
    .venv/bin/python -m bench.throughput --full     # 3 rounds of 10 s, medians

The load generator runs on the same machine (its CPU is not counted in "CPU per request").
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.load import run_load  # noqa: E402

SPEC = {"quota": "bench-h200", "image": "busybox", "command": "train", "gpus_per_worker": 1}
NODES = 64  # heartbeat senders (each a registered node with 8 GPUs)
BULK = 100  # jobs per array request (and per batch request in --full; quick: 20)


def fixtures(nodes: int = NODES) -> tuple[str, list[str]]:
    """A tenant, quota, researcher with an API token, and NODES registered nodes; returns
    the API token and the nodes' tokens (setup: through the actions, not measured)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts.actions import issue_api_token
    from agents.actions import issue_bootstrap_token, register_node
    from protocol.agent import RegisterRequest
    from quotas.models import Membership, Quota, ResourceType, Tenant, Workspace

    tenant = Tenant.objects.create(name="bench")
    workspace = Workspace.objects.create(tenant=tenant, name="bench")
    quota = Quota.objects.create(
        tenant=tenant, name="bench-h200", resource_type=ResourceType.LINGJUN, gpu_type="H200",
        gpus=8,
    )  # fmt: skip
    workspace.quotas.add(quota)
    user = get_user_model().objects.create(username="bench")
    Membership.objects.create(workspace=workspace, user=user)
    _, api_token = issue_api_token(user)
    _, boot = issue_bootstrap_token(None, "bench", single_use=False)
    tokens = []
    for i in range(nodes):
        req = RegisterRequest.model_validate({"name": f"hb-{i}", "facts": facts(i)})
        _, token = register_node(boot, req, timezone.now())
        tokens.append(token)
    return api_token, tokens


def facts(node: int) -> dict:
    return {
        "hostname": f"hb-{node}",
        "agent_version": "0.1.0",
        "runtime": "process",
        "resource_type": "Lingjun",
        "gpu_type": "H200",
        "cpus": 112,
        "memory_gb": 2048,
        "gpus": [
            {
                "index": g,
                "uuid": f"GPU-{node:04d}-{g}",
                "name": "NVIDIA H200",
                "memory_total_mb": 143_771,
                "utilization": 0,
            }
            for g in range(8)
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--threads", type=int, default=8, help="client connections")
    args = parser.parse_args(argv)
    rounds, seconds = (3, 10.0) if args.full else (1, 4.0)
    with common.clean_database("throughput") as url:
        common.setup_django(url)
        api_token, node_tokens = fixtures()
        database = url.rsplit("/", 1)[1]
        auth = {"Authorization": f"Bearer {api_token}", "Content-Type": "application/json"}
        one = json.dumps(SPEC).encode()
        array = json.dumps({"count": BULK, "job": SPEC}).encode()
        per_batch = BULK if args.full else 20  # each spec validated alone: slow (see notes)
        batch = json.dumps({"jobs": [SPEC | {"name": f"b{i}"} for i in range(per_batch)]})
        beats = [json.dumps({"facts": facts(i), "workers": []}).encode() for i in range(NODES)]

        def heartbeat(t: int, i: int):
            node = (t + args.threads * i) % NODES
            headers = {"Authorization": f"Bearer {node_tokens[node]}",
                       "Content-Type": "application/json"}  # fmt: skip
            return "POST", "/api/v1/agent/heartbeat/", beats[node], headers

        paths = [
            ("trivial view (GET /healthz)", 1, lambda t, i: ("GET", "/healthz", None, {})),
            ("POST /api/v1/jobs (one job)", 1, lambda t, i: ("POST", "/api/v1/jobs", one, auth)),
            (f"POST /api/v1/jobs/array ({BULK} jobs)", BULK,
             lambda t, i: ("POST", "/api/v1/jobs/array", array, auth)),
            (f"POST /api/v1/jobs/batch ({per_batch} jobs)", per_batch,
             lambda t, i: ("POST", "/api/v1/jobs/batch", batch.encode(), auth)),
            ("POST /api/v1/agent/heartbeat/ (8 GPUs, no change)", 1, heartbeat),
        ]  # fmt: skip
        rows = []
        env = common.bench_env(url)
        with common.gunicorn(env) as (base, pid):
            for label, per_request, make in paths:
                results = [
                    run_load(base, pid, make, threads=args.threads, seconds=seconds,
                             database=database)
                    for _ in range(rounds)
                ]  # fmt: skip
                results.sort(key=lambda r: r.rate)
                r = results[len(results) // 2]
                if r.errors:
                    print(f"{label}: {r.errors} errors, first: {r.first_error}", file=sys.stderr)
                rows.append(
                    {
                        "path": label,
                        "requests_per_s": round(r.rate, 1),
                        "items_per_s": round(r.rate * per_request, 1),
                        "p50_ms": round(1000 * common.percentile(r.latencies, 50), 1),
                        "p95_ms": round(1000 * common.percentile(r.latencies, 95), 1),
                        "web_cpu_ms_per_req": round(r.cpu_ms_per_request(), 2),
                        "db_cpu_ms_per_req": round(r.db_ms_per_request(), 2),
                        "errors": r.errors,
                    }
                )
        base_cpu = rows[0]["web_cpu_ms_per_req"] or float("nan")
        for row in rows:
            row["cpu_x_trivial"] = round(row["web_cpu_ms_per_req"] / base_cpu, 1)
    by = {r["path"]: r for r in rows}
    common.report(
        "throughput",
        rows,
        quick=not args.full,
        notes=f"{rounds} round(s) of {seconds:g} s per path, {args.threads} client threads on "
        "the same machine; gunicorn 4 workers x 4 threads; CPU from /proc (web: gunicorn's "
        "processes; db: the PostgreSQL backends of the benchmark's database)",
        single_submit_per_s=by["POST /api/v1/jobs (one job)"]["requests_per_s"],
        array_jobs_per_s=rows[2]["items_per_s"],
        batch_jobs_per_s=rows[3]["items_per_s"],
        heartbeats_per_s=rows[4]["requests_per_s"],
        targets={"jobs_per_s_via_api": 1000, "single_submit_cpu_ms": 5, "heartbeats_per_s": 1000},
    )


if __name__ == "__main__":
    main()
