"""Pages at scale: 100,000 jobs, 1,000 nodes (8 GPUs each), 1,000,000 log lines on a clean
PostgreSQL database (seeded by bulk SQL), served by gunicorn (gthread, 4 x 4); p50/p95 of
each page and its ratio to a trivial view (`/healthz`) measured in the same run.

    .venv/bin/python -m bench.pages            # quick: 20,000 jobs, 200 nodes, 200,000 lines
    .venv/bin/python -m bench.pages --full     # 100,000 jobs, 1,000 nodes, 1,000,000 lines

Seeding: one row of each kind through the ORM, then copied by `INSERT ... SELECT` over
generate_series (every column copied, the varying ones computed), then ANALYZE. 2 % of the
jobs are Running (one pod each, on the nodes), 3 % waiting, the rest final; the job whose
pages are measured is Running with a fifth of the log lines (100 lines per chunk, as the
agent ships them); the other lines are spread over other running jobs' pods.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.load import run_load  # noqa: E402

LINES_PER_CHUNK = 100


def _copy_rows(model, template_id: int, count: int, computed: dict[str, str], extra_from=""):
    """INSERT `count` copies of row `template_id` of `model`, with `computed` columns as SQL
    expressions of g (1..count) and the template row t."""
    from django.db import connection

    table = model._meta.db_table
    cols = [f.column for f in model._meta.concrete_fields if f.column != "id"]
    values = [computed.get(c, f't."{c}"') for c in cols]
    sql = (
        f'INSERT INTO "{table}" ({", ".join(f'"{c}"' for c in cols)}) '
        f'SELECT {", ".join(values)} FROM "{table}" t {extra_from}'
        f"CROSS JOIN generate_series(1, {count}) g WHERE t.id = {template_id}"
    )
    with connection.cursor() as cur:
        cur.execute(sql)


def seed(jobs: int, nodes: int, lines: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from accounts.actions import issue_api_token
    from cluster.models import GpuDevice, Node
    from jobs.models import Job, LogChunk, Pod
    from policy.statuses import JobStatus
    from quotas.models import Membership, Quota, ResourceType, Tenant, Workspace

    tenant = Tenant.objects.create(name="bench")
    workspace = Workspace.objects.create(tenant=tenant, name="bench")
    quota = Quota.objects.create(
        tenant=tenant, name="bench-h200", resource_type=ResourceType.LINGJUN,
        gpu_type="H200", gpus=nodes * 8,
    )  # fmt: skip
    workspace.quotas.add(quota)
    user = get_user_model().objects.create(username="bench")
    user.set_password("bench")
    user.save()
    Membership.objects.create(workspace=workspace, user=user)
    _, api_token = issue_api_token(user)
    made = Node.objects.bulk_create(
        Node(name=f"node-{i:04d}", resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=8,
             cpus=112, memory_gb=2048)
        for i in range(nodes)
    )  # fmt: skip
    GpuDevice.objects.bulk_create(
        GpuDevice(node=n, index=i, uuid=f"GPU-{n.pk}-{i}") for n in made for i in range(8)
    )
    first_node = made[0].pk
    # The measured job: Running, one pod, a fifth of the lines.
    job = Job.objects.create(
        name="measured", workspace=workspace, owner=user, quota=quota, image="busybox",
        command="train", status=JobStatus.RUNNING, gpus_per_worker=8,
    )  # fmt: skip
    pod = Pod.objects.create(
        job=job, attempt=1, rank=0, node=made[0], gpu_indices=list(range(8)), gpus=8, cpus=8,
        memory_gb=64, charged_quota=quota, status="Running",
    )  # fmt: skip
    text = "".join(
        f"step {i} loss {1 / (i + 1):.6f} lr 0.0003 throughput 1234.5 samples/s\n"
        for i in range(LINES_PER_CHUNK)
    )
    chunk = LogChunk.objects.create(
        pod=pod, attempt=1, seq_start=0, seq_end=LINES_PER_CHUNK - 1, text=text
    )
    # Other jobs: 2 % Running, 3 % Pending/Inqueue, the rest final, newest first by id.
    status_sql = (
        "CASE WHEN g % 50 = 0 THEN 'Running' WHEN g % 100 IN (1, 2) THEN 'Pending' "
        "WHEN g % 100 = 3 THEN 'Inqueue' WHEN g % 10 = 4 THEN 'Failed' ELSE 'Succeeded' END"
    )
    _copy_rows(Job, job.pk, jobs - 1, {
        "name": "'job-' || g",
        "status": status_sql,
        "created_at": "now() - (g || ' seconds')::interval",
        "updated_at": "now() - (g || ' seconds')::interval",
    })  # fmt: skip
    running = list(
        Job.objects.filter(status=JobStatus.RUNNING).exclude(pk=job.pk).values_list("pk", flat=True)
    )
    # One 1-GPU pod per running job: copies of the measured pod spread over the other nodes,
    # each on a GPU of its own (live pods hold distinct GPUs: jobs_heldgpu).
    spread = max(1, nodes - 1)
    if len(running) > spread * 8:
        raise ValueError(f"{len(running)} running pods do not fit on {spread} nodes x 8 GPUs")
    with connection.cursor() as cur:
        cols = [f.column for f in Pod._meta.concrete_fields if f.column != "id"]
        node = f"({first_node} + 1 + j.k % {spread})"
        index = f"((j.k / {spread}) % 8)"
        computed = {
            "job_id": "j.id",
            "node_id": node,
            "gpu_indices": f"jsonb_build_array({index})",
            "gpu_uuids": f"jsonb_build_array('GPU-' || {node} || '-' || {index})",
            "gpus": "1",
        }
        values = [computed.get(c, f't."{c}"') for c in cols]
        cur.execute(
            f'INSERT INTO "{Pod._meta.db_table}" ({", ".join(f'"{c}"' for c in cols)}) '
            f'SELECT {", ".join(values)} FROM "{Pod._meta.db_table}" t CROSS JOIN '
            f"(SELECT id, row_number() OVER (ORDER BY id) - 1 AS k "
            f" FROM \"{Job._meta.db_table}\" WHERE status = 'Running' AND id <> {job.pk}) j "
            f"WHERE t.id = {pod.pk}"
        )
    mine = max(1, lines // 5 // LINES_PER_CHUNK)
    _copy_rows(LogChunk, chunk.pk, mine - 1, {
        "seq_start": f"g * {LINES_PER_CHUNK}",
        "seq_end": f"g * {LINES_PER_CHUNK} + {LINES_PER_CHUNK - 1}",
    })  # fmt: skip
    others = list(Pod.objects.exclude(pk=pod.pk).values_list("pk", flat=True)[:99])
    rest = (lines - mine * LINES_PER_CHUNK) // LINES_PER_CHUNK
    if others and rest > 0:
        per_pod = max(1, rest // len(others))
        with connection.cursor() as cur:
            cur.execute(
                "CREATE TEMP TABLE bench_pods (k int, pod_id bigint); "
                + "INSERT INTO bench_pods VALUES "
                + ", ".join(f"({k}, {p})" for k, p in enumerate(others))
            )
        cols = [f.column for f in LogChunk._meta.concrete_fields if f.column != "id"]
        computed = {
            "pod_id": "p.pod_id",
            "seq_start": f"(g % {per_pod}) * {LINES_PER_CHUNK}",
            "seq_end": f"(g % {per_pod}) * {LINES_PER_CHUNK} + {LINES_PER_CHUNK - 1}",
        }
        values = [computed.get(c, f't."{c}"') for c in cols]
        with connection.cursor() as cur:
            cur.execute(
                f'INSERT INTO "{LogChunk._meta.db_table}" ({", ".join(f'"{c}"' for c in cols)}) '
                f'SELECT {", ".join(values)} FROM "{LogChunk._meta.db_table}" t '
                f"CROSS JOIN generate_series(0, {per_pod * len(others) - 1}) g "
                f"JOIN bench_pods p ON p.k = g / {per_pod} WHERE t.id = {chunk.pk}"
            )
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    stored_lines = sum(
        e - s + 1 for s, e in LogChunk.objects.values_list("seq_start", "seq_end").iterator()
    )
    return {
        "user": user,
        "api_token": api_token,
        "job": job.pk,
        "last_seq": mine * LINES_PER_CHUNK - 1,
        "jobs": Job.objects.count(),
        "nodes": Node.objects.count(),
        "lines": stored_lines,
        "running_pods": len(running) + 1,
    }


def session_cookie(user) -> str:
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--threads", type=int, default=2, help="client connections")
    args = parser.parse_args(argv)
    jobs, nodes, lines = (100_000, 1_000, 1_000_000) if args.full else (20_000, 200, 200_000)
    seconds = 10.0 if args.full else 3.0
    with common.clean_database("pages") as url:
        common.setup_django(url)
        import time

        t = time.perf_counter()
        data = seed(jobs, nodes, lines)
        seeded = time.perf_counter() - t
        print(f"seeded {data['jobs']:,} jobs, {data['nodes']:,} nodes, {data['lines']:,} log "
              f"lines in {seeded:.1f} s", flush=True)  # fmt: skip
        page = {"Cookie": session_cookie(data["user"])}
        api = {"Authorization": f"Bearer {data['api_token']}"}
        j, last = data["job"], data["last_seq"]
        viewer = f"/jobs/{j}/logs/?attempt=1&rank=0&format=json"
        paths = [
            ("trivial view (GET /healthz)", "/healthz", {}),
            ("job list /jobs/", "/jobs/", page),
            ("job detail /jobs/<id>/", f"/jobs/{j}/", page),
            ("log partial: viewer poll, 1,000 new lines", f"{viewer}&after={last - 1000}", page),
            ("log partial: viewer poll, caught up", f"{viewer}&after={last}", page),
            ("full log page (HTML, 5,000 lines)", f"/jobs/{j}/logs/?after={last - 5000}", page),
            ("API list /api/v1/jobs", "/api/v1/jobs", api),
            ("API log tail (100 lines)", f"/api/v1/jobs/{j}/logs?after={last - 100}", api),
        ]
        rows = []
        with common.gunicorn(common.bench_env(url)) as (base, pid):
            for label, path, headers in paths:
                r = run_load(base, pid, lambda t, i, p=path, h=headers: ("GET", p, None, h),
                             threads=args.threads, seconds=seconds, warmup=2)  # fmt: skip
                if r.errors:
                    raise RuntimeError(f"{label}: {r.errors} errors, first {r.first_error}")
                rows.append({
                    "page": label,
                    "requests": r.requests,
                    "p50_ms": round(1000 * common.percentile(r.latencies, 50), 1),
                    "p95_ms": round(1000 * common.percentile(r.latencies, 95), 1),
                    "cpu_ms_per_req": round(r.cpu_ms_per_request(), 1),
                    "errors": r.errors,
                })  # fmt: skip
    base_p50 = rows[0]["p50_ms"] or float("nan")
    base_cpu = rows[0]["cpu_ms_per_req"] or float("nan")
    for row in rows:
        row["p50_x_trivial"] = round(row["p50_ms"] / base_p50, 1)
        row["cpu_x_trivial"] = round(row["cpu_ms_per_req"] / base_cpu, 1)
    size = f"{data['jobs']:,} jobs, {data['nodes']:,} nodes, {data['lines']:,} log lines"
    common.report(
        "pages",
        rows,
        quick=not args.full,
        notes=("" if args.full else "quick: a fifth of the full size; ")
        + f"{size} (seeded in {seeded:.0f} s); {args.threads} client threads, {seconds:g} s "
        "per page; gunicorn 4 x 4",
        seeded=size,
        targets={"page_p95_ms": 100, "api_x_trivial": 3},
    )


if __name__ == "__main__":
    main()
