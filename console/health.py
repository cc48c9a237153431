"""Site-level endpoints of the shell: the health check and the favicon (no page)."""

import logging

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

log = logging.getLogger(__name__)


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """No icon, but no 404 either (the admin's pages do not say `rel=icon`)."""
    response = HttpResponse(status=204)
    response["Cache-Control"] = "public, max-age=86400"
    return response


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness plus a database round trip, for load balancers and compose healthchecks."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError:
        log.exception("health check: database unreachable")
        return JsonResponse({"status": "error", "database": "unreachable"}, status=503)
    return JsonResponse({"status": "ok", "database": "ok"})
