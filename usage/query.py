"""How the usage reports read the buckets (docs/usage-history.md, "Speed"): a period as the
fewest pre-rolled buckets that add up to it (whole UTC months, then days, then hours), one
aggregate in SQL, fetched as plain tuples.

A month by quota reads 200 month rows, not 6,000 day rows or 150,000 hours; rows come back
with their period as epoch seconds and their sums cast to integers, so no row goes through
the ORM's per-value converters (the time per row was what the page spent, bench/usage.py).
"""

import operator
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from functools import reduce

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import BigIntegerField, F, Func, Q, QuerySet, Sum
from django.db.models.functions import Cast, TruncMonth

DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def month_floor(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month(at: datetime) -> datetime:
    return month_floor(month_floor(at) + timedelta(days=32))


def _day_floor(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _ceil(at: datetime, floor, step) -> datetime:
    low = floor(at)
    return low if low == at else step(low)


Piece = tuple[str, datetime, datetime]  # (span, from, to)


def pieces(since: datetime, until: datetime, coarsest: str = "m") -> list[Piece]:
    """[since, until) (whole hours) as (span, from, to) ranges of buckets that add up to it
    exactly: hours up to the first UTC day, days up to the first UTC month, whole months
    (only with `coarsest` "m"), and back down at the end. Pure."""
    out: list[Piece] = []

    def add(span: str, lo: datetime, hi: datetime) -> None:
        if lo < hi:
            out.append((span, lo, hi))

    day_lo = min(_ceil(since, _day_floor, lambda d: d + DAY), until)
    day_hi = max(_day_floor(until), day_lo)
    add("h", since, day_lo)
    if coarsest == "m":
        month_lo = min(_ceil(day_lo, month_floor, next_month), day_hi)
        month_hi = max(month_floor(day_hi), month_lo)
        add("d", day_lo, month_lo)
        add("m", month_lo, month_hi)
        add("d", month_hi, day_hi)
    else:
        add("d", day_lo, day_hi)
    add("h", day_hi, until)
    return out


def covering(pieces_: Iterable[Piece]) -> Q:
    """The buckets of those ranges, as one filter (an OR of index ranges)."""
    where = [Q(span=span, start__gte=lo, start__lt=hi) for span, lo, hi in pieces_]
    return reduce(operator.or_, where) if where else Q(pk__in=[])


class Epoch(Func):
    """A date-time as integer seconds since 1970 (UTC), on PostgreSQL and SQLite."""

    output_field = BigIntegerField()

    def as_sql(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"CAST(EXTRACT(EPOCH FROM {sql}) AS BIGINT)", params

    def as_sqlite(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"CAST(strftime('%%s', {sql}) AS INTEGER)", params


def from_epoch(seconds: int) -> datetime:
    return _EPOCH + timedelta(seconds=seconds)


def sums(columns: Iterable[str]) -> dict:
    """SUM per column, as an integer on every database (PostgreSQL sums bigints as numeric,
    which loads as a slow Decimal)."""
    return {f"s_{c}": Cast(Sum(F(c)), BigIntegerField()) for c in columns}


def month_period(field: str = "start") -> Epoch:
    return Epoch(TruncMonth(field, tzinfo=UTC))


def fetch(query: QuerySet) -> list[tuple]:
    """The query's rows as plain tuples, past the ORM's per-value converters (its values
    must come back as the database gives them: integers and text)."""
    try:
        sql, params = query.query.sql_with_params()
    except EmptyResultSet:  # e.g. a scope of no quotas
        return []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
