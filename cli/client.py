"""The API over HTTP, with retries that are safe to make.

GETs and stops are retried on connection errors, 502/503/504 and 429 (after Retry-After);
creates are retried too, because each carries an Idempotency-Key made once per command:
a retry the console already served returns the first request's jobs, never new ones.
"""

import time
import uuid
from typing import Any

import requests

from cli import __version__

RETRIES = 5
RETRY_STATUSES = {502, 503, 504}
MAX_WAIT = 60.0


class ApiFailure(Exception):
    """The console refused the request (4xx) or could not be reached after retries."""

    def __init__(
        self, message: str, *, status: int | None = None, code: str = "", field: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field

    @property
    def unreachable(self) -> bool:
        return self.status is None or self.status >= 500


def new_idempotency_key() -> str:
    return f"cli-{uuid.uuid4()}"


class Client:
    def __init__(self, url: str, token: str, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/") + "/api/v1"
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update(
            {"Authorization": f"Bearer {token}", "User-Agent": f"gpu-console-cli/{__version__}"}
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        params = {k: v for k, v in (params or {}).items() if v is not None}
        delay = 0.5
        for attempt in range(1, RETRIES + 1):
            try:
                response = self.session.request(
                    method,
                    self.url + path,
                    params=params,
                    json=body,
                    headers=headers,
                    timeout=timeout or self.timeout,
                )
            except requests.RequestException as exc:
                if attempt == RETRIES:
                    raise ApiFailure(f"cannot reach {self.url}: {exc}") from None
                time.sleep(delay)
                delay *= 2
                continue
            retryable = response.status_code == 429 or response.status_code in RETRY_STATUSES
            if retryable and attempt < RETRIES:
                wait = response.headers.get("Retry-After", "")
                time.sleep(min(float(wait), MAX_WAIT) if wait.isdigit() else delay)
                delay *= 2
                continue
            return self._result(response)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _result(response: requests.Response) -> Any:
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.ok:
            return data
        error = (data or {}).get("error") if isinstance(data, dict) else None
        if error:
            message = error.get("message") or error.get("code", "error")
            raise ApiFailure(
                message,
                status=response.status_code,
                code=error.get("code", ""),
                field=error.get("field"),
            )
        raise ApiFailure(f"HTTP {response.status_code}", status=response.status_code)

    def stream(self, path: str):
        """The raw body of a GET, in blocks (a result file); ApiFailure on an error."""
        response = self.session.get(self.url + path, stream=True, timeout=self.timeout)
        if not response.ok:
            self._result(response)
        yield from response.iter_content(1 << 20)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, *, idempotency_key: str | None = None) -> Any:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self.request("POST", path, body=body, headers=headers)
