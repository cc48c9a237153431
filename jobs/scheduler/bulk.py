"""Bulk writes of the scheduling cycle (raw SQL, one statement per batch; see cycle.py)."""

from datetime import datetime

from django.db import connection

from jobs.models import Job, JobEvent
from jobs.statuses import Actor

# Rows per UPDATE of waiting jobs (5 parameters each; SQLite allows 32,766 per statement).
_UPDATE_BATCH = 500
_INSERT_BATCH = 1000  # rows per INSERT of events (7 parameters each)


def insert_events(items: list[tuple[int, int, str, str, str]], now: datetime) -> None:
    """JobEvents of the cycle's status changes, one multi-row INSERT per 1,000: building
    10,000 model instances for bulk_create costs about a second on its own."""
    qn = connection.ops.quote_name
    table = qn(JobEvent._meta.db_table)
    names = ("job", "created_at", "attempt", "from_status", "to_status", "reason", "actor")
    columns = ", ".join(qn(JobEvent._meta.get_field(f).column) for f in names)
    stamp = connection.ops.adapt_datetimefield_value(now)
    actor = str(Actor.SCHEDULER)
    with connection.cursor() as cursor:
        for i in range(0, len(items), _INSERT_BATCH):
            chunk = items[i : i + _INSERT_BATCH]
            values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(chunk))
            params = []
            for job_id, attempt, from_status, to_status, reason in chunk:
                params += [job_id, stamp, attempt, str(from_status), str(to_status), reason, actor]
            cursor.execute(f"INSERT INTO {table} ({columns}) VALUES {values}", params)  # noqa: S608


def update_waiting(items: list[tuple[int, str, str, str, int | None]], now: datetime) -> int:
    """Set status, reason and position of many waiting jobs, one statement per batch.

    items: (job id, expected status, new status, reason, position). A row changes only if it
    is still in its expected status (compare-and-set). Returns the number of rows changed.
    `bulk_update` would do the same with a CASE per row and field, which costs seconds for a
    few thousand jobs on both databases; a join on a VALUES list costs milliseconds.
    (UPDATE … FROM needs SQLite 3.33+; Python 3.12 ships 3.40+.)
    """
    qn = connection.ops.quote_name
    table = qn(Job._meta.db_table)
    col = {f: qn(Job._meta.get_field(f).column) for f in ("id", "status", "status_reason")}
    position = qn(Job._meta.get_field("queue_position").column)
    updated_at = qn(Job._meta.get_field("updated_at").column)
    stamp = connection.ops.adapt_datetimefield_value(now)
    total = 0
    with connection.cursor() as cursor:
        for i in range(0, len(items), _UPDATE_BATCH):
            chunk = items[i : i + _UPDATE_BATCH]
            values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk))
            cursor.execute(
                # VALUES columns are column1…column5 on both SQLite and PostgreSQL. No CTE:
                # Python's sqlite3 reports no rowcount for a statement starting with WITH.
                f"UPDATE {table} SET {col['status']} = v.new_status, "  # noqa: S608
                f"{col['status_reason']} = v.new_reason, "
                f"{position} = CAST(v.new_position AS integer), {updated_at} = %s "
                "FROM (SELECT column1 AS job_id, column2 AS expected, column3 AS new_status, "
                "column4 AS new_reason, column5 AS new_position "
                f"FROM (VALUES {values}) AS vals) AS v "
                f"WHERE {table}.{col['id']} = v.job_id AND {table}.{col['status']} = v.expected",
                # Plain str: a StrEnum reaches the driver as its value on every backend.
                [stamp] + [str(v) if isinstance(v, str) else v for item in chunk for v in item],
            )
            total += cursor.rowcount
    return total
