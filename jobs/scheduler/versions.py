"""Rows kept decoded between cycles, each under its row version, on PostgreSQL
(docs/scheduling.md, "The snapshot's waiting jobs").

A row's version is the pair (`xmin`, `cmin`) of its live tuple, which every UPDATE replaces,
also twice in one transaction (a new command id). A read asks the database for the rows' ids
and versions only (one narrow query), and for the whole row of just those not decoded at
that version: new rows, and any row some writer changed, whoever wrote it and however. Rows
come back from the database each time: a missed write can only cost a re-read, never serve a
stale row. The memory is dropped every REBUILD_AFTER_S and on any error.
"""

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

__all__ = ["FETCH_ALL_SHARE", "ID_CHUNK", "REBUILD_AFTER_S", "RowMemory", "row_version"]

# The kept reads' knobs, here for every reader (also jobs.scheduler.live).
REBUILD_AFTER_S = 600.0  # read every row again this often, whatever the versions say
FETCH_ALL_SHARE = 2  # more than 1/2 of the rows unseen: read them all in one go
ID_CHUNK = 5000  # ids per read of the unseen rows


def row_version(model) -> RawSQL:
    """The row's version, as text: annotate a queryset of `model` with it."""
    table = connection.ops.quote_name(model._meta.db_table)
    return RawSQL(f"{table}.xmin::text || '.' || {table}.cmin::text", ())  # noqa: S611


class RowMemory:
    """One process's decoded rows of one query, by id, with the version each was decoded
    at. Replaced whole by each read (a reader in another thread keeps the dict it started
    with). PostgreSQL only."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[str, Any]] = {}
        self._since = time.monotonic()
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Drop every row: the next read decodes them all."""
        with self._lock:
            self._rows, self._since = {}, time.monotonic()

    def read(
        self,
        queue: QuerySet,
        rows: Callable[[QuerySet], Iterable[Any]],
        decode: Callable[[Any], Any],
    ) -> list[Any]:
        """The decoded rows `queue` selects now. `rows(queryset)` reads whole rows, each
        with `.id` and `.row_version` (annotate `row_version`); `decode` makes one."""
        try:
            return self._read(queue, rows, decode)
        except Exception:
            self.forget()  # on any doubt, start again from the database
            raise

    def _read(self, queue: QuerySet, rows, decode) -> list[Any]:
        with self._lock:
            if time.monotonic() - self._since > REBUILD_AFTER_S:
                self._rows, self._since = {}, time.monotonic()
            known = self._rows
        version = row_version(queue.model)
        current = list(queue.annotate(row_version=version).values_list("id", "row_version"))
        found: dict[int, tuple[str, Any]] = {}
        unseen: list[int] = []
        for row_id, seen_at in current:
            entry = known.get(row_id)
            if entry is not None and entry[0] == seen_at:
                found[row_id] = entry
            else:
                unseen.append(row_id)
        if unseen:
            # Read after the versions: a row changed meanwhile comes back newer, with its own
            # version; one that left the query meanwhile does not come back.
            if len(unseen) * FETCH_ALL_SHARE > len(current):
                found = {}
                reads = [queue]
            else:
                reads = [
                    queue.filter(id__in=unseen[i : i + ID_CHUNK])
                    for i in range(0, len(unseen), ID_CHUNK)
                ]
            for read in reads:
                for row in rows(read):
                    found[row.id] = (row.row_version, decode(row))
        with self._lock:
            self._rows = found
        return [entry[1] for entry in found.values()]
