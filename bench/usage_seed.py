"""Seeding of bench/usage.py: 13 months of usage buckets for 200 quotas and 2,000 users, and
per-job buckets of 100,000 jobs, in SQL on PostgreSQL (generate_series) or SQLite (a
recursive CTE), as the roll-up would have written them (months the sums of their days)."""

from django.db import connection

QUOTAS, USERS = 200, 2_000
PER = USERS // QUOTAS
COLS = (
    "span, start, quota_id, workspace_id, user_id, gpu_type, in_quota_us, borrowed_us, "
    "lent_us, idle_held_us, waiting_us"
)


def _sql(sql: str) -> None:
    with connection.cursor() as cur:
        cur.execute(sql)


def _dialect(days: int, jobs: int) -> dict[str, str]:
    """The pieces of SQL that differ: series of hours, days, users, jobs and the times."""
    step = days * 86400 // jobs
    if connection.vendor == "postgresql":
        ago = f"now() - (g.x * {step} || ' s')::interval"
        return {
            "hours": f"generate_series(0, {days * 24 - 1}) h(x)",
            "days": f"generate_series(0, {days - 1}) d(x)",
            "users": f"generate_series(0, {USERS - 1}) u(x)",
            "ten": "generate_series(0, 9) k(x)",
            "jobs": f"generate_series(1, {jobs}) g(x)",
            "with": "",
            "hour": "date_trunc('hour', now()) - (h.x || ' hours')::interval",
            "day": "date_trunc('day', now()) - (d.x || ' days')::interval",
            "month": "date_trunc('month', start)",
            "job_hour": f"date_trunc('hour', {ago})",
            "job_day": f"date_trunc('day', {ago})",
        }

    def series(name: str, first: int, last: int) -> str:
        return f"{name}(x) AS (SELECT {first} UNION ALL SELECT x + 1 FROM {name} WHERE x < {last})"

    return {
        "hours": "h",
        "days": "d",
        "users": "u",
        "ten": "k",
        "jobs": "g",
        "with": "WITH RECURSIVE "
        + ", ".join(
            (
                series("h", 0, days * 24 - 1),
                series("d", 0, days - 1),
                series("u", 0, USERS - 1),
                series("k", 0, 9),
                series("g", 1, jobs),
            )
        )
        + " ",
        "hour": "strftime('%Y-%m-%d %H:00:00', 'now', '-' || h.x || ' hours')",
        "day": "strftime('%Y-%m-%d 00:00:00', 'now', '-' || d.x || ' days')",
        "month": "strftime('%Y-%m-01 00:00:00', start)",
        "job_hour": f"strftime('%Y-%m-%d %H:00:00', 'now', '-' || (g.x * {step}) || ' seconds')",
        "job_day": f"strftime('%Y-%m-%d 00:00:00', 'now', '-' || (g.x * {step}) || ' seconds')",
    }


def seed_buckets(days: int, jobs: int, spaces, users) -> int:
    """Hourly, daily and monthly rows for every quota over `days`, per-person rows beside
    them (ten per hour, one per user per day), and one hour and one day row per job."""
    from usage.models import JobUsageBucket, UsageBucket

    w0, u0 = spaces[0].pk, users[0].pk
    table, job_table = UsageBucket._meta.db_table, JobUsageBucket._meta.db_table
    s = _dialect(days, jobs)
    q0 = "(SELECT min(id) FROM quotas_quota)"
    _sql(f"DELETE FROM {table}")
    _sql(f"DELETE FROM {job_table}")  # the roll-up timed before may have written some
    _sql(f"""{s["with"]}INSERT INTO {table} ({COLS})
        SELECT 'h', {s["hour"]}, q.id, 0, 0, 'H200', 3600000000 * (1 + q.id % 16),
          36000000 * (h.x % 7), 36000000 * (q.id % 3), 3600000 * (h.x % 11), 360000000 * (h.x % 5)
        FROM quotas_quota q CROSS JOIN {s["hours"]}""")
    _sql(f"""{s["with"]}INSERT INTO {table} ({COLS})
        SELECT 'd', {s["day"]}, q.id, 0, 0, 'H200', 86400000000 * (1 + q.id % 16), 864000000,
          864000000, 86400000, 8640000000
        FROM quotas_quota q CROSS JOIN {s["days"]}""")
    _sql(f"""{s["with"]}INSERT INTO {table} ({COLS})
        SELECT 'h', {s["hour"]}, {q0} + ((h.x * 10 + k.x) % {USERS}) / {PER},
          {w0} + ((h.x * 10 + k.x) % {USERS}) / {PER}, {u0} + (h.x * 10 + k.x) % {USERS},
          'H200', 3600000000, 0, 0, 0, 0
        FROM {s["hours"]} CROSS JOIN {s["ten"]}""")
    _sql(f"""{s["with"]}INSERT INTO {table} ({COLS})
        SELECT 'd', {s["day"]}, {q0} + u.x / {PER}, {w0} + u.x / {PER}, {u0} + u.x, 'H200',
          3600000000 * (1 + u.x % 5), 0, 0, 360000000, 0
        FROM {s["days"]} CROSS JOIN {s["users"]}""")
    _sql(f"""INSERT INTO {table} ({COLS})
        SELECT 'm', {s["month"]}, quota_id, workspace_id, user_id, gpu_type, sum(in_quota_us),
          sum(borrowed_us), sum(lent_us), sum(idle_held_us), sum(waiting_us)
        FROM {table} WHERE span = 'd'
        GROUP BY {s["month"]}, quota_id, workspace_id, user_id, gpu_type""")
    cols = f"job_id, {COLS}"
    for span, start in (("h", s["job_hour"]), ("d", s["job_day"])):
        _sql(f"""{s["with"]}INSERT INTO {job_table} ({cols})
            SELECT g.x, '{span}', {start}, {q0} + (g.x % {USERS}) / {PER},
              {w0} + (g.x % {USERS}) / {PER}, {u0} + g.x % {USERS}, 'H200',
              (1 + g.x % 8) * (60 + g.x % 7200) * CAST(1000000 AS BIGINT), 0, 0, 0, 0
            FROM {s["jobs"]}""")
    # VACUUM too on PostgreSQL: index-only scans of the covering index need the visibility
    # map that autovacuum would write soon after such a load.
    _sql("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
    return UsageBucket.objects.count() + JobUsageBucket.objects.count()
