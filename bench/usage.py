"""Usage history at scale (docs/usage-history.md): 200 quotas, 2,000 users, 100,000 finished
jobs over 13 months and 13 months of buckets on a clean PostgreSQL database; the roll-up's
time per run, and p50/p95 of the Usage page and the usage API for a month by quota, through
gunicorn (gthread, 4 x 4), beside a trivial view.

    .venv/bin/python -m bench.usage            # quick: 20,000 jobs, 3 months of buckets
    .venv/bin/python -m bench.usage --full     # 100,000 jobs, 13 months of buckets
    .venv/bin/python -m bench.usage --full --sqlite   # the same on a SQLite file

Seeding: the tenant, quotas, workspaces and users through the ORM; on PostgreSQL, jobs,
their pods (one each, a tenth borrowing from the next quota) and their events (submitted,
started) copied by `INSERT ... SELECT` over generate_series, and the roll-up timed over
them (not on SQLite: the page and the API read only buckets); buckets in SQL
(bench/usage_seed.py: one row per quota per hour, day and month; per (quota, workspace,
user): ten per hour, one per user per day; per job an hour and a day).
"""

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.load import run_load  # noqa: E402
from bench.pages import session_cookie  # noqa: E402
from bench.usage_seed import QUOTAS, USERS, seed_buckets  # noqa: E402


def _people():
    from django.contrib.auth import get_user_model

    from accounts.actions import issue_api_token
    from quotas.models import Membership, Quota, ResourceType, Role, Tenant, Workspace

    tenant = Tenant.objects.create(name="bench")
    quotas = Quota.objects.bulk_create(
        Quota(
            tenant=tenant,
            name=f"q-{i:03d}",
            resource_type=ResourceType.LINGJUN,
            gpu_type="H200",
            gpus=16,
        )
        for i in range(QUOTAS)
    )
    spaces = Workspace.objects.bulk_create(
        Workspace(tenant=tenant, name=f"w-{i:03d}") for i in range(QUOTAS)
    )
    Workspace.quotas.through.objects.bulk_create(
        Workspace.quotas.through(workspace_id=w.pk, quota_id=q.pk)
        for w, q in zip(spaces, quotas, strict=True)
    )
    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"u-{i:04d}") for i in range(USERS)
    )
    per = USERS // QUOTAS
    Membership.objects.bulk_create(
        Membership(workspace=spaces[i // per], user=u) for i, u in enumerate(users)
    )
    owner = users[0]
    Membership.objects.filter(user=owner).update(role=Role.QUOTA_OWNER)  # sees all 200
    _, token = issue_api_token(owner)
    return quotas, spaces, users, owner, token


def _sql(sql: str) -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(sql)


def _jobs(jobs: int, quotas, spaces, users, days: int) -> None:
    """Finished jobs spread evenly over `days`, one pod each, submitted then started."""
    from jobs.models import Job, JobEvent, Pod

    q0, w0, u0 = quotas[0].pk, spaces[0].pk, users[0].pk
    step = days * 86400 // jobs
    per = USERS // QUOTAS
    _sql(f"""
        INSERT INTO {Job._meta.db_table} (workspace_id, quota_id, owner_id, name, image, command,
          env, workers, gpus_per_worker, cpus_per_worker, memory_gb_per_worker, priority,
          idle_resources, fault_tolerance, ft_config, checkpoint_dir, preemption_count,
          node_loss_count, resume_from, excluded_nodes, status, status_reason, attempt,
          restart_count, stop_reason, stop_final_status, result_contract, distributed, data,
          code, rendezvous_hosts, created_at, updated_at, started_at, finished_at)
        SELECT {w0} + (g % {USERS}) / {per}, {q0} + (g % {USERS}) / {per}, {u0} + g % {USERS},
          'job-' || g, 'img', 'train', '{{}}', 1, 1 + g % 8, 4, 16, 1, 'Off', false, '{{}}', '',
          0, 0, '', '[]', 'Completed', '', 1, 0, '', '', '{{}}', '{{}}', '{{}}', '{{}}', '[]',
          now() - (g * {step} || ' seconds')::interval,
          now() - (g * {step} - 3600 || ' seconds')::interval,
          now() - (g * {step} - 60 || ' seconds')::interval,
          now() - (g * {step} - 60 - g % 7200 || ' seconds')::interval
        FROM generate_series(1, {jobs}) g""")
    _sql(f"""
        INSERT INTO {Pod._meta.db_table} (job_id, attempt, rank, gpu_indices, gpu_uuids, gpus,
          cpus, memory_gb, charged_quota_id, in_quota, status, status_reason, desired,
          stop_grace_seconds, stop_reason, stop_as, error_message, container_id, log_next_seq,
          progress_phase, progress_metrics, recent_line_hashes, report_refused, logs_delivered,
          ended_by, created_at, started_at, finished_at)
        SELECT j.id, 1, 0, '[]', '[]', j.gpus_per_worker, 4, 16,
          CASE WHEN j.id % 10 = 0 THEN {q0} + (j.quota_id - {q0} + 1) % {QUOTAS}
               ELSE j.quota_id END,
          j.id % 10 <> 0, 'Succeeded', '', 'Run', 30, '', '', '', '', 0, '', '{{}}', '[]', '', true,
          '', j.started_at, j.started_at, j.finished_at
        FROM {Job._meta.db_table} j""")
    _sql(f"""
        INSERT INTO {JobEvent._meta.db_table} (job_id, created_at, attempt, from_status,
          to_status, reason, actor)
        SELECT id, created_at, 1, '', 'Pending', 'submitted', 'user' FROM {Job._meta.db_table}
        UNION ALL
        SELECT id, started_at, 1, 'Inqueue', 'Starting', 'placed', 'scheduler'
        FROM {Job._meta.db_table}""")


def _time_rollups() -> dict:
    """The roll-up's cost: a steady-state run (the open hour and the one before) and a run
    that backfills a whole week, over the seeded jobs."""
    from django.utils import timezone

    from policy.usage_history import floor_hour
    from usage.actions.rollup import roll_up_usage
    from usage.models import UsageRollup

    now = timezone.now()
    times = {}
    for label, hours in (("rollup_2h_s", 1), ("rollup_week_s", 168)):
        UsageRollup.objects.update_or_create(
            pk=1, defaults={"rolled_until": floor_hour(now) - timedelta(hours=hours)}
        )
        started = time.perf_counter()
        result = roll_up_usage(now=now)
        times[label] = round(time.perf_counter() - started, 2)
        times[label.replace("_s", "_buckets")] = result.buckets
    return times


@contextlib.contextmanager
def _database(sqlite: bool) -> Iterator[tuple[str, dict]]:
    """(DATABASE_URL, extra environment): a clean PostgreSQL database, or a migrated SQLite
    file in a temporary folder (DATABASE_URL empty)."""
    if not sqlite:
        with common.clean_database("usage") as url:
            yield url, {}
        return
    with tempfile.TemporaryDirectory() as folder:
        extra = {"SQLITE_PATH": str(Path(folder) / "usage.sqlite3")}
        env = common.bench_env("", **extra)
        subprocess.run(
            [common.PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=env,
            check=True,
        )
        yield "", extra


def _paths(page: dict, api: dict) -> list[tuple[str, str, dict]]:
    """(label, path, headers) of what is measured: the last whole calendar month."""
    from django.utils import timezone

    first = (timezone.now().date().replace(day=1) - timedelta(days=1)).replace(day=1)
    month = f"period=month&date={first:%Y-%m-%d}"
    until = (first + timedelta(days=32)).replace(day=1)
    since = f"{first:%Y-%m-%d}&until={until:%Y-%m-%d}"
    return [
        ("trivial view (GET /healthz)", "/healthz", {}),
        ("Usage page, a month by quota", f"/usage/?{month}&group=quota", page),
        ("Usage page, a month by user", f"/usage/?{month}&group=user", page),
        ("Usage charts (JSON), a month", f"/usage/charts/?{month}", page),
        (
            "API usage, a month by quota (day)",
            f"/api/v1/usage?group_by=quota&since={since}&granularity=day",
            api,
        ),
        (
            "API usage, a month by quota (month)",
            f"/api/v1/usage?group_by=quota&since={since}&granularity=month",
            api,
        ),
        ("Usage page, a month by job (first 100)", f"/usage/?{month}&group=job", page),
        (
            "API usage, a month by job (first 100, month)",
            f"/api/v1/usage?group_by=job&since={since}&granularity=month",
            api,
        ),
    ]


def _measure(base: str, pid: int, what: tuple, threads: int, seconds: float) -> dict:
    label, path, headers = what
    r = run_load(
        base,
        pid,
        lambda t, i: ("GET", path, None, headers),
        threads=threads,
        seconds=seconds,
        warmup=2,
    )
    if r.errors:
        raise RuntimeError(f"{label}: {r.errors} errors, first {r.first_error}")
    return {
        "page": label,
        "requests": r.requests,
        "p50_ms": round(1000 * common.percentile(r.latencies, 50), 1),
        "p95_ms": round(1000 * common.percentile(r.latencies, 95), 1),
        "cpu_ms_per_req": round(r.cpu_ms_per_request(), 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--sqlite", action="store_true", help="a SQLite file, not PostgreSQL")
    parser.add_argument("--threads", type=int, default=2, help="client connections")
    args = parser.parse_args(argv)
    jobs, days = (100_000, 396) if args.full else (20_000, 92)
    seconds = 10.0 if args.full else 3.0
    with _database(args.sqlite) as (url, extra):
        common.setup_django(url, **extra)
        started = time.perf_counter()
        quotas, spaces, users, owner, token = _people()
        rollups = {}
        if not args.sqlite:
            _jobs(jobs, quotas, spaces, users, days)
            rollups = _time_rollups()
        buckets = seed_buckets(days, jobs, spaces, users)
        seeded = time.perf_counter() - started
        print(
            f"seeded {jobs:,} jobs and {buckets:,} buckets in {seeded:.0f} s; {rollups}", flush=True
        )
        paths = _paths({"Cookie": session_cookie(owner)}, {"Authorization": f"Bearer {token}"})
        with common.gunicorn(common.bench_env(url, **extra)) as (base, pid):
            rows = [_measure(base, pid, p, args.threads, seconds) for p in paths]
    size = f"{jobs:,} jobs, {days} days of buckets ({buckets:,} rows), {QUOTAS} quotas, "
    size += f"{USERS:,} users, " + ("SQLite" if args.sqlite else "PostgreSQL")
    common.report(
        "usage",
        rows,
        quick=not args.full,
        notes=("" if args.full else "quick: 3 months of buckets, 20,000 jobs; ")
        + f"{size} (seeded in {seeded:.0f} s); {args.threads} client threads, {seconds:g} s "
        "per page; gunicorn 4 x 4",
        seeded=size,
        **rollups,
        targets={"page_p95_ms": 100, "api_p95_ms": 100},
    )


if __name__ == "__main__":
    main()
