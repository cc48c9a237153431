"""URLs of /api/v1/ (mounted by console.urls): the ninja API's routes, each also with a
trailing slash, and JSON answers where Django or ninja would answer in HTML or plain text
(unknown paths, a wrong method, a body over the size limit)."""

from functools import wraps

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path, re_path

from accounts.api_auth import error_response, not_found
from api.main import api
from api.parsing import MAX_BODY_BYTES

app_name = "api"


def json_errors(view):
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        length = request.META.get("CONTENT_LENGTH") or "0"
        if not (length.isascii() and length.isdigit()) or int(length) > MAX_BODY_BYTES:
            return error_response(413, "too_large", f"The body exceeds {MAX_BODY_BYTES} bytes.")
        try:
            response = view(request, *args, **kwargs)
        except Http404:
            return error_response(404, "not_found", f"No API endpoint at {request.path}.")
        if response.status_code == 405 and not response.get("Content-Type", "").startswith(
            "application/json"
        ):
            allowed = response.get("Allow", "")
            error = error_response(405, "method_not_allowed", f"Use {allowed or 'another'} here.")
            error["Allow"] = allowed
            return error
        return response

    wrapper.csrf_exempt = True
    return wrapper


def _routes() -> list[URLPattern]:
    patterns, _app, _namespace = api.urls
    routes = []
    for pattern in patterns:
        view = json_errors(pattern.callback)
        route = str(pattern.pattern)
        routes.append(path(route, view, name=pattern.name))
        if route and not route.endswith("/"):
            routes.append(path(route + "/", view))
    return routes


urlpatterns = [
    *_routes(),
    # Anything else under /api/v1/ answers in the API's error shape, not an HTML page: any
    # character at all, a newline included ("." stops at one: /jobs/9%0Ax/stop).
    re_path(r"^[\s\S]*$", not_found),
]
