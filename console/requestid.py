"""Request ids: every request gets one (the caller's X-Request-ID when it is sane, else a new
one), every log line written while handling it carries it, the response echoes it, and the
background triggers the request enqueues take it along (console.triggers, console.celery).

No Django import at module level: gunicorn's logging config (deploy/gunicorn.conf.py) uses the
filter before Django is set up.
"""

import contextvars
import logging
import re
import time
import uuid
from collections.abc import Callable

REQUEST_ID_HEADER = "X-Request-ID"
_SANE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

access_log = logging.getLogger("console.access")


def new_request_id() -> str:
    return uuid.uuid4().hex


def accept_request_id(value: str | None) -> str | None:
    """The caller's id if it is short and plain (it ends up in logs), else None."""
    if value and _SANE.match(value):
        return value
    return None


def current_request_id() -> str | None:
    return _current.get()


def set_request_id(value: str | None) -> contextvars.Token:
    return _current.set(value)


def reset_request_id(token: contextvars.Token) -> None:
    _current.reset(token)


class RequestIdFilter(logging.Filter):
    """Adds `record.request_id` (or "-") to every record, for the plain and JSON formats."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = _current.get() or "-"
        return True


def RequestIdMiddleware(get_response: Callable) -> Callable:
    """Sets the request id for the request's duration and writes one access line per request
    (gunicorn's own access log knows no request id, so it is off)."""

    def middleware(request):
        request_id = accept_request_id(request.headers.get(REQUEST_ID_HEADER)) or new_request_id()
        request.request_id = request_id
        token = _current.set(request_id)
        started = time.monotonic()
        try:
            response = get_response(request)
            response[REQUEST_ID_HEADER] = request_id
            access_log.info(
                '"%s %s" %s',
                request.method,
                request.get_full_path(),
                response.status_code,
                extra={
                    "http_method": request.method,
                    "path": request.path,
                    "status_code": response.status_code,
                    "duration_ms": round((time.monotonic() - started) * 1000, 1),
                    "remote_addr": request.META.get("REMOTE_ADDR", ""),
                },
            )
            return response
        finally:
            _current.reset(token)

    return middleware
