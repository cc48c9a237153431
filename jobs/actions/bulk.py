"""Many rows in one statement: the one place that knows PostgreSQL from SQLite.

The scheduling cycle writes thousands of rows (docs/scheduling.md); `bulk_update`,
`bulk_create` and model instances cost seconds for ten thousand jobs. So its statements take
their rows from a *row source* joined in SQL:

- PostgreSQL: ONE JSON parameter, `(SELECT (e ->> 0)::bigint AS job_id, … FROM
  json_array_elements(%s::json) AS e) AS v`. The server parses it in milliseconds and
  json.dumps is C: passing each column as an array costs psycopg ~5x more CPU (90 ms
  against 16 ms for 10,000 rows of 5 columns), one placeholder per value far more.
- SQLite: a multi-row VALUES list per batch (its parameter limit), columns renamed from
  column1…columnN. (UPDATE … FROM needs SQLite 3.33+; Python 3.12 ships 3.40+. No CTE:
  Python's sqlite3 reports no rowcount for a statement starting with WITH.)

Id look-ups likewise: `= ANY(%s)` with one array on PostgreSQL, `IN (…)` per batch on SQLite.
"""

import json
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import connection

# (name, PostgreSQL type) of each column of a row source; "jsonb" columns hold JSON values.
Record = Sequence[tuple[str, str]]
SQLITE_PARAMETERS = 30_000  # below SQLite's 32,766 per statement
_ID_BATCH = 2000


def postgres() -> bool:
    return connection.vendor == "postgresql"


def _plain(value: Any, kind: str) -> Any:
    if kind == "jsonb":
        return json.dumps(value)
    return str(value) if isinstance(value, str) else value  # a StrEnum as its value


def row_sources(record: Record, rows: Sequence[Sequence[Any]]) -> Iterator[tuple[str, list]]:
    """(SQL of a derived table `v` with `record`'s columns, its parameters), one per
    statement to run: a single one on PostgreSQL, one per batch on SQLite."""
    if postgres():
        columns = ", ".join(
            f"(e -> {i})::{kind} AS {name}" if kind == "jsonb" else f"(e ->> {i})::{kind} AS {name}"
            for i, (name, kind) in enumerate(record)
        )
        sql = f"(SELECT {columns} FROM json_array_elements(%s::json) AS e) AS v"  # noqa: S608
        yield sql, [json.dumps(rows)]
        return
    width = len(record)
    columns = ", ".join(
        f"CAST(column{i + 1} AS integer) AS {name}"
        if kind in ("integer", "bigint", "smallint")
        else f"column{i + 1} AS {name}"
        for i, (name, kind) in enumerate(record)
    )
    batch = max(1, SQLITE_PARAMETERS // width)
    one = "(" + ", ".join(["%s"] * width) + ")"
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        params = [
            _plain(v, kind) for row in chunk for v, (_, kind) in zip(row, record, strict=True)
        ]
        values = ", ".join([one] * len(chunk))
        yield f"(SELECT {columns} FROM (VALUES {values}) AS vals) AS v", params  # noqa: S608


def columns(model) -> dict[str, str]:
    """Each concrete field's column of `model`, quoted, by field name (for the SQL here)."""
    qn = connection.ops.quote_name
    return {f.name: qn(f.column) for f in model._meta.concrete_fields}


def typed(placeholder: str, kind: str) -> str:
    """A parameter of a given type in a SELECT list (SQLite stores what it is given)."""
    return f"{placeholder}::{kind}" if postgres() else placeholder


def id_conditions(column: str, ids: Sequence[int]) -> Iterator[tuple[str, list]]:
    """(`column` matches these ids, parameters), one per statement to run."""
    if postgres():
        yield f"{column} = ANY(%s)", [list(ids)]
        return
    for start in range(0, len(ids), _ID_BATCH):
        chunk = list(ids[start : start + _ID_BATCH])
        yield f"{column} IN ({', '.join(['%s'] * len(chunk))})", chunk


def for_update() -> str:
    """Row locks where the database has them (SQLite's IMMEDIATE transaction already holds
    the write lock: console.settings)."""
    return " FOR UPDATE" if connection.features.has_select_for_update else ""


def execute(sql: str, params: list) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
