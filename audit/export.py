"""Audit entries as CSV: row shaping, and the streamed response the admin and the owners'
audit page send."""

import csv
import json
from collections.abc import Iterable, Iterator

from django.http import StreamingHttpResponse

from audit.models import AuditEntry

COLUMNS = [
    "id",
    "at",
    "action",
    "actor",
    "object_type",
    "object_id",
    "object",
    "source_address",
    "via",
    "user_agent",
    "detail",
]
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> str:
    """Text for a spreadsheet cell: a leading =, +, -, @ would run as a formula when the
    file is opened (CSV injection), so such a cell is prefixed with a quote."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def rows(entries: Iterable[AuditEntry]) -> Iterator[list[str]]:
    yield COLUMNS
    for e in entries:
        yield [
            safe_cell(v)
            for v in (
                e.pk,
                e.at.isoformat(),
                e.action,
                e.actor_name,
                e.object_type,
                e.object_id,
                e.object_repr,
                e.source_address or "",
                e.via,
                e.user_agent,
                json.dumps(e.detail, sort_keys=True, ensure_ascii=False) if e.detail else "",
            )
        ]


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_response(entries: Iterable[AuditEntry], name: str) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse(
        (writer.writerow(row) for row in rows(entries)), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
