"""Requests that lost their database connection (accounts.dbloss): a request that is safe to
run twice is run once more on a new connection; what still fails (or is not safe to repeat)
is a 503 with Retry-After. First in MIDDLEWARE after the request id, so the retry runs the
whole chain (sessions, authentication, the audit's user lookup included).

A lost connection can surface in three places, and each becomes the same marked 503:
a view's exception (`process_exception` here), the API's own exception handler
(`api.main`), and an exception raised inside another middleware (the session or user
lookup), which Django turns into a response at once: `server_error` (the console's
`handler500`) answers that one. docs/fault-tolerance.md ("A lost database connection").
"""

import re
import sys
from collections.abc import Callable, Mapping

from django.http import HttpRequest, HttpResponse
from django.views.defaults import server_error as django_server_error

from accounts.dbloss import is_lost_connection, lost_connection_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
IDEMPOTENT_METHODS = frozenset({"PUT", "DELETE"})
# Creates that carry an Idempotency-Key (api.idempotency: a repeat replays the first) and a
# stop (stopping a stopping or ended job changes nothing).
KEYED_CREATES = re.compile(r"^/api/v1/jobs(/batch|/array)?/?$")
STOPS = re.compile(r"^/api/v1/jobs/\d+/stop/?$")


def safe_to_repeat(method: str, path: str, headers: Mapping[str, str]) -> bool:
    """Whether running the request a second time leaves what the first would have (pure)."""
    if method in SAFE_METHODS or method in IDEMPOTENT_METHODS:
        return True
    if method != "POST":
        return False
    if STOPS.match(path):
        return True
    return bool(KEYED_CREATES.match(path)) and bool(headers.get("Idempotency-Key", "").strip())


class RetryLostConnection:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if getattr(response, "lost_database_connection", False) and safe_to_repeat(
            request.method or "", request.path, request.headers
        ):
            response = self.get_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """Pages (the API's and the agents' errors are answered where they are raised)."""
        if is_lost_connection(exception):
            return lost_connection_response(exception)
        return None


def server_error(request: HttpRequest) -> HttpResponse:
    """`handler500`: an exception no view caught (one a middleware raised). A lost
    connection is the marked 503 (retried above when safe); anything else is the 500 page."""
    exception = sys.exc_info()[1]
    if exception is not None and is_lost_connection(exception):
        return lost_connection_response(exception)
    return django_server_error(request)
