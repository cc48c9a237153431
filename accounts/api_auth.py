"""Bearer-token authentication and the error shape of the researcher API (/api/v1/).

Every error, from any endpoint, is `{"error": {"code", "message", "field", "fields"?}}`
with a stable machine code (the API itself is `api/`, on django-ninja). Tokens are looked
up by their prefix and compared by digest in constant time (accounts.tokens); the plain
token is never stored.
"""

import copy
from datetime import timedelta
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from accounts.actions import TOKENS_VERSION, touch_last_used
from accounts.models import ApiToken
from accounts.tokens import matches, split_prefix
from accounts.versions import VersionedCache
from protocol.text import JsonBodyError, load_json

# Writing last_used_at on every call would turn each read into a write; a minute is precise
# enough to tell whether a token is in use.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiError(Exception):
    """Raised anywhere inside an API view; rendered as the standard error body."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        fields: dict[str, list[str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.fields = fields
        self.headers = headers or {}

    def response(self) -> JsonResponse:
        response = error_response(self.status, self.code, self.message, self.field, self.fields)
        for name, value in self.headers.items():
            response[name] = value
        return response


def json_body(raw: bytes) -> Any:
    """A request body as JSON, or a stable 400 (`invalid_json`: not JSON, not UTF-8, nested
    too deep; `invalid_text`: a string that is not valid Unicode, with its field). Never a
    RecursionError or an unencodable string reaching the code behind it."""
    try:
        return load_json(raw)
    except JsonBodyError as exc:
        raise ApiError(400, exc.code, exc.message, exc.field) from None


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    fields: dict[str, list[str]] | None = None,
) -> JsonResponse:
    body: dict[str, Any] = {"code": code, "message": message, "field": field}
    if fields is not None:
        body["fields"] = fields
    return JsonResponse({"error": body}, status=status)


# Live tokens by prefix, per process; stale in every process once a token or a user is
# saved, revoked or deleted (accounts.versions; bumped by accounts.actions and signals).
TOKENS = VersionedCache[ApiToken | None](TOKENS_VERSION)
_PERM_CACHES = ("_perm_cache", "_user_perm_cache", "_group_perm_cache")


def _load_token(prefix: str) -> ApiToken | None:
    return (
        ApiToken.objects.select_related("user")
        .filter(prefix=prefix, revoked_at__isnull=True, user__is_active=True)
        .first()
    )


def _live_token(prefix: str) -> ApiToken | None:
    """The live token of this prefix (cached), as a copy of its own for this request: a
    view may set attributes on `request.user`, and permissions are never cached here."""
    token = TOKENS.get(prefix, lambda: _load_token(prefix))
    if token is None:
        return None
    mine, user = copy.copy(token), copy.copy(token.user)
    for name in _PERM_CACHES:
        user.__dict__.pop(name, None)
    mine.user = user
    return mine


def authenticate_token(header: str) -> ApiToken | None:
    """The live token named by an `Authorization: Bearer …` header, or None."""
    scheme, _, plain = header.partition(" ")
    plain = plain.strip()
    if scheme.lower() != "bearer" or not plain:
        return None
    prefix = split_prefix(plain, ApiToken.KIND)
    if prefix is None:
        return None
    token = _live_token(prefix)
    if token is None or not matches(plain, token.digest):
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        touch_last_used(token, now, LAST_USED_RESOLUTION)
        TOKENS.note(prefix, lambda cached: setattr(cached, "last_used_at", now))
        token.last_used_at = now
    return token


@csrf_exempt
def not_found(request: HttpRequest, *args, **kwargs) -> JsonResponse:
    """Unknown API paths answer in the API's error shape, not with an HTML page."""
    return error_response(404, "not_found", f"No API endpoint at {request.path}.")
