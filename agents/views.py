"""The agent API (docs/agent-protocol.md): JSON over HTTPS, bearer tokens, strict schemas.

These endpoints are called by machines with bearer tokens, never by a browser with a session
cookie, so they are the only views exempt from CSRF. Errors are JSON:
`{"error": {"code", "message", "field"}}` with 400/401/403/404/405/409/413.

A heartbeat or a log request is a batch of independent items (protocol.batches): each is
read on its own, and one bad item is refused alone in the reply (`refused`), never failing
the request. Only what concerns the whole request answers 400.
"""

import logging
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from accounts.dbloss import is_lost_connection, lost_connection_response, reset_connections
from agents import actions
from agents.auth import AgentApiError, authenticate_node, bearer_token
from agents.heartbeat.actions import answer_heartbeat
from agents.wake import WAIT_REFUSED_RETRY_BEATS, NoSlot, watcher
from protocol.agent import RegisterRequest, RegisterResponse, WaitReply, WaitRequest
from protocol.batches import RequestRefused, parse_log_batch
from protocol.text import JsonBodyError, load_json

log = logging.getLogger(__name__)


def _error(status: int, code: str, message: str, field: str | None = None) -> JsonResponse:
    response = JsonResponse(
        {"error": {"code": code, "message": message, "field": field}}, status=status
    )
    if status == 405:
        response["Allow"] = "POST"
    return response


def _ok(model: BaseModel) -> HttpResponse:
    return HttpResponse(model.model_dump_json(), content_type="application/json")


def agent_endpoint(view: Callable[[HttpRequest], HttpResponse]):
    """POST only, CSRF-exempt (bearer-token machine endpoint), errors as JSON."""

    @csrf_exempt
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method != "POST":
            return _error(405, "method_not_allowed", "use POST")
        for last_try in (False, True):
            try:
                return view(request, *args, **kwargs)
            except AgentApiError as exc:
                return _error(exc.status, exc.code, exc.message, exc.field)
            except JsonBodyError as exc:  # a batch's body (protocol.text)
                return _error(400, exc.code, exc.message, exc.field)
            except RequestRefused as exc:  # a batch as a whole (protocol.batches)
                return _error(400, "invalid", exc.message, exc.field)
            except (OperationalError, InterfaceError) as exc:
                # The connection went away: a heartbeat or log batch is safe to apply
                # twice (level-triggered; each sequence once), so it runs once more on a
                # new connection before the agent is told 503 (accounts.dbloss).
                if not is_lost_connection(exc):
                    raise
                if last_try:
                    return lost_connection_response(exc)
                reset_connections()
        raise AssertionError("unreachable")

    return wrapper


def _body(request: HttpRequest) -> bytes:
    try:
        return request.body
    except RequestDataTooBig:
        raise AgentApiError(
            413, "too_large", "request body too large; send smaller batches"
        ) from None


def _parse[M: BaseModel](request: HttpRequest, schema: type[M]) -> M:
    body = _body(request)
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        # The first error, with its location; never echo the input back.
        first = exc.errors(include_input=False, include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        code = "invalid_json" if first["type"] == "json_invalid" else "invalid"
        raise AgentApiError(400, code, first["msg"], field) from None


@agent_endpoint
def register(request: HttpRequest) -> HttpResponse:
    plain = bearer_token(request)
    req = _parse(request, RegisterRequest)
    node, token = actions.register_node(
        plain, req, timezone.now(), remote_addr=request.META.get("REMOTE_ADDR", "")
    )
    return _ok(
        RegisterResponse(
            node_id=node.pk, node_token=token, heartbeat_interval=actions.heartbeat_interval()
        )
    )


@agent_endpoint
def heartbeat(request: HttpRequest) -> HttpResponse:
    """One entry, one action (agents.heartbeat.actions): quiet where nothing changed."""
    now = timezone.now()  # receive time, before any work: the node was alive at this moment
    body = answer_heartbeat(bearer_token(request), _body(request), now)
    return HttpResponse(body, content_type="application/json")


@agent_endpoint
def logs(request: HttpRequest) -> HttpResponse:
    node = authenticate_node(request)
    # Read item by item (protocol.batches); text is repaired per item.
    items = parse_log_batch(load_json(_body(request), repair=True))
    return _ok(actions.store_logs(node, items, timezone.now()))


@agent_endpoint
def wait(request: HttpRequest) -> HttpResponse:
    """Held until the node's desired state differs from the token the agent knows (then it
    heartbeats at once), or the timeout (agents.wake). Reads only; writes nothing."""
    node = authenticate_node(request)
    req = _parse(request, WaitRequest)
    timeout = min(req.timeout, float(settings.AGENT_WAIT_TIMEOUT))
    try:
        seen = watcher().wait(node.pk, req.known, timeout)
    except NoSlot:  # it learns of new work at its heartbeats; asks again much later
        retry = actions.heartbeat_interval() * WAIT_REFUSED_RETRY_BEATS
        return _ok(WaitReply(changed=False, retry_after=retry))
    return _ok(WaitReply(changed=seen is not None, desired_version=seen))


_ENDPOINTS = ("register", "heartbeat", "logs", "wait")


@csrf_exempt
def not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    hint = f"; did you mean {path}/ ?" if path in _ENDPOINTS else ""
    return _error(404, "not_found", f"no such agent endpoint{hint}")
