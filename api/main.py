"""The researcher API (/api/v1/) on django-ninja: the instance, its error handlers, routers.

Every error, whatever raised it (our code, ninja's validation, Django), leaves as
`{"error": {"code", "message", "field", "fields"?}}` with a stable machine code; an
unexpected exception is logged and answered as a JSON 500 without internals.
"""

import logging

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Swagger
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.openapi.schema import OpenAPISchema

from accounts.api_auth import ApiError, error_response
from accounts.dbloss import is_lost_connection, lost_connection_response
from api.links import add_links
from api.parsing import SafeJsonParser
from api.security import ConsoleSession, TokenAuth
from api.validation import field_messages
from audit.actions import record
from audit.denials import record_denial
from quotas.access import HiddenObject

log = logging.getLogger(__name__)

DESCRIPTION = """\
Submit and manage training jobs, read their logs, events, restarts, checkpoints and
metrics, and see quotas, queues and nodes. Quota owners change their tenant's quota tree
(with a `preview=true` dry run), workspaces' members and roles.

Authenticate with `Authorization: Bearer <token>` (create a token on the console's
*API token* page). Errors have the shape
`{"error": {"code": "...", "message": "...", "field": "...", "fields": {...}}}`;
`code` is stable (validation_error, invalid_json, invalid_text, not_authenticated,
permission_denied, not_found, method_not_allowed, conflict, idempotency_key_reused,
too_large, rate_limited, server_error; the owners' API adds stale_preview, last_owner,
ambiguous). Requests are limited per token; a 429 carries
`Retry-After`. Create requests accept an `Idempotency-Key` header: a retry with the same
key returns the jobs of the first request instead of creating new ones.
"""


class ConsoleApi(NinjaAPI):
    """The document django-ninja generates, with the links a client follows from a created
    job to its operations (`api.links`)."""

    def get_openapi_schema(self, *, path_prefix=None, path_params=None) -> OpenAPISchema:
        document = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        # A batch's items are validated one by one (api.jobs.create_batch), each a JobCreate.
        batch = document["components"]["schemas"]["JobBatchCreate"]["properties"]["jobs"]
        batch["items"] = {"$ref": "#/components/schemas/JobCreate"}
        return add_links(document)


api = ConsoleApi(
    title="GPU console API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api",
    auth=[TokenAuth(), ConsoleSession()],
    parser=SafeJsonParser(),
    # Served from ninja's own static files (ninja is an installed app): no CDN at run time.
    # validatorUrl None: Swagger UI would otherwise fetch a badge from swagger.io.
    docs=Swagger(settings={"validatorUrl": None, "persistAuthorization": True}),
    docs_url="/docs",
    openapi_url="/openapi.json",
)

_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    429: "rate_limited",
}


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    for error in exc.errors:
        loc = list(error.get("loc", ()))
        if loc[:1] == ["body"] and len(loc) <= 2:
            return error_response(400, "invalid_json", "The body must be a JSON object.")
    fields = field_messages(exc.errors)
    first = next(iter(fields))
    return error_response(
        400,
        "validation_error",
        fields[first][0],
        field=None if first == "__all__" else first,
        fields=fields,
    )


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    if exc.status == 403:
        _denied(request, 403, exc.message)
    return exc.response()


@api.exception_handler(AuthenticationError)
def _not_authenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    if request.headers.get("Authorization"):
        _denied(request, 401, "invalid or revoked API token")
    response = error_response(
        401, "not_authenticated", "Send a valid API token as 'Authorization: Bearer …'."
    )
    response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, ApiError):  # raised by our parser inside ninja's
        return exc.__cause__.response()
    code = _CODES.get(exc.status_code, "bad_request")
    if code == "bad_request":
        code = "invalid_json" if "body" in exc.message.lower() else "bad_request"
    return error_response(exc.status_code, code, str(exc))


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    if isinstance(exc, HiddenObject):  # it exists, the caller may not see it: audited
        record_denial(request, 404, exc.object_type, exc.object_id, "not visible")
    return error_response(404, "not_found", "No such object.")


@api.exception_handler(RequestDataTooBig)
def _too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return error_response(413, "too_large", "The request body is too large.")


@api.exception_handler(Exception)
def _server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    if is_lost_connection(exc):  # 503 + Retry-After; console.dbretry retries a safe request
        return lost_connection_response(exc)
    log.exception("API %s %s failed", request.method, request.path, exc_info=exc)
    return error_response(500, "server_error", "The server failed; the error was logged.")


def _denied(request: HttpRequest, status: int, why: str) -> None:
    """Denied access goes to the audit log (a refused credential, a forbidden action)."""
    user = getattr(request, "user", None)
    try:
        record(
            "access.denied",
            actor=user,
            object_type="api",
            object_repr=f"{request.method} {request.path}"[:200],
            detail={"status": status, "reason": why},
        )
    except Exception:
        log.exception("audit: recording denied access failed")


def _register() -> None:
    from api import cluster, job_data, jobs, owners, results, templates, usage_history

    api.add_router("/jobs", jobs.router, tags=["jobs"])
    api.add_router("/jobs", job_data.router, tags=["job details"])
    api.add_router("/jobs", results.router, tags=["job details"])
    api.add_router("/", cluster.router, tags=["quotas and nodes"])
    api.add_router("/", usage_history.router, tags=["usage history"])
    api.add_router("/", owners.router, tags=["quota owners"])
    api.add_router("/", templates.router, tags=["job templates"])


_register()
