"""Requests that lost their database connection (accounts.dbloss): a safe request is run
once more on a new connection; what still fails (or is not safe to repeat) is a 503 with
Retry-After. First in MIDDLEWARE after the request id, so the retry runs the whole chain."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from accounts.dbloss import is_lost_connection, lost_connection_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class RetryLostConnection:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if getattr(response, "lost_database_connection", False) and (
            request.method in SAFE_METHODS
        ):
            response = self.get_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """Pages (the API's and the agents' errors are answered where they are raised)."""
        if is_lost_connection(exception):
            return lost_connection_response(exception)
        return None
