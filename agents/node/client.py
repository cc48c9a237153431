"""HTTP client for the agent API: JSON over HTTPS with retries and exponential backoff.

Connection errors, timeouts, 5xx and 429 are retried (they are the console restarting or
overloaded); other 4xx are the agent's fault or a revoked credential and raise at once.
One client per thread: a requests.Session is not meant to be shared across threads.
"""

import logging
import random
import threading
from collections.abc import Iterator

import requests
from pydantic import BaseModel, ValidationError

from protocol.agent import (
    ErrorResponse,
    Heartbeat,
    HeartbeatReply,
    LogAck,
    LogBatch,
    RegisterRequest,
    RegisterResponse,
    WaitReply,
    WaitRequest,
)

log = logging.getLogger(__name__)

API_PREFIX = "/api/v1/agent/"


class ConsoleRefused(Exception):
    """The console refused the request (4xx other than 429): retrying it as it is would not
    help (a revoked token, a request the console will never accept)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field


GATEWAY_STATUSES = frozenset({502, 503, 504})


class TransportError(Exception):
    """The console could not be reached or kept failing; worth trying again later."""


class ServerFailed(TransportError):
    """The console answered 5xx: it is up, but failed on this request (maybe on something in
    it: callers that can split a batch try its items one at a time)."""


def backoff_delays(base: float = 0.5, cap: float = 30.0) -> Iterator[float]:
    """0.5, 1, 2, 4 … capped, each with ±20% jitter so a fleet does not retry in step."""
    delay = base
    while True:
        yield delay * random.uniform(0.8, 1.2)
        delay = min(delay * 2, cap)


class AgentClient:
    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        stop: threading.Event | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._stop = stop or threading.Event()
        self._session = requests.Session()
        self._session.headers["User-Agent"] = "gpu-agent"

    def copy(self) -> "AgentClient":
        """A client for another thread, with the same server, token and stop event."""
        return AgentClient(self.server, token=self.token, timeout=self.timeout, stop=self._stop)

    def close(self) -> None:
        self._session.close()

    def register(self, bootstrap_token: str, req: RegisterRequest, *, attempts: int | None = None):
        return self._post(
            "register/", req, RegisterResponse, token=bootstrap_token, attempts=attempts
        )

    def heartbeat(self, hb: Heartbeat, *, attempts: int | None = 2) -> HeartbeatReply:
        return self._post("heartbeat/", hb, HeartbeatReply, attempts=attempts)

    def send_logs(self, batch: LogBatch, *, attempts: int | None = 1) -> LogAck:
        return self._post("logs/", batch, LogAck, attempts=attempts)

    def wait(self, req: WaitRequest) -> WaitReply:
        """Held by the console until the node's desired state changes or `req.timeout`
        passes; one attempt (the caller decides when to ask again)."""
        return self._post("wait/", req, WaitReply, attempts=1, timeout=req.timeout + self.timeout)

    def _post[M: BaseModel](
        self,
        path: str,
        body: BaseModel,
        reply_type: type[M],
        *,
        token: str | None = None,
        attempts: int | None,
        timeout: float | None = None,
    ) -> M:
        """POST with retries; `attempts=None` retries until the stop event is set."""
        token = token or self.token
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = body.model_dump_json().encode()
        url = self.server + API_PREFIX + path
        delays = backoff_delays()
        tries = 0
        while True:
            tries += 1
            failure = TransportError
            try:
                response = self._session.post(
                    url, data=data, headers=headers, timeout=timeout or self.timeout
                )
            except requests.RequestException as exc:
                problem = f"cannot reach {url}: {exc.__class__.__name__}: {exc}"
            else:
                if response.status_code == 200:
                    try:
                        return reply_type.model_validate_json(response.content)
                    except ValidationError as exc:
                        problem = f"unexpected reply from {url}: {exc.errors()[0]['msg']}"
                elif response.status_code == 429 or response.status_code >= 500:
                    problem = f"{url} answered {response.status_code}"
                    # Only a 500 is the console failing on this request. 502/503/504 come
                    # from a proxy while the console restarts or is overloaded: an outage,
                    # which says nothing about the items (they are never set aside for it).
                    if response.status_code not in GATEWAY_STATUSES and response.status_code >= 500:
                        failure = ServerFailed
                else:
                    raise _refusal(response)
            if attempts is not None and tries >= attempts:
                raise failure(problem)
            delay = next(delays)
            log.warning("%s; retrying in %.1fs", problem, delay)
            if self._stop.wait(delay):
                raise TransportError(f"{problem} (gave up: shutting down)")


def _refusal(response: requests.Response) -> ConsoleRefused:
    try:
        body = ErrorResponse.model_validate_json(response.content).error
        return ConsoleRefused(response.status_code, body.code, body.message, body.field)
    except ValidationError:
        return ConsoleRefused(response.status_code, "http_error", response.text[:200])
