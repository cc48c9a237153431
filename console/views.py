"""Site-level pages: health check and the researcher's API token page."""

import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from accounts.actions import revoke_api_tokens, rotate_api_token
from accounts.models import ApiToken

log = logging.getLogger(__name__)


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


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def api_token(request: HttpRequest) -> HttpResponse:
    """Create or rotate the user's API token (shown once, in this response only), or revoke.

    The plain token is rendered straight into the POST response rather than passed through
    the session or messages, so it is never written to the database.
    """
    plain = None
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "create":
            # Rotation: the new token replaces every live one of this user.
            _, plain = rotate_api_token(request.user)
        elif action == "revoke":
            token_id = request.POST.get("token", "")
            if not token_id.isdigit():
                return HttpResponseBadRequest("token must be a token id")
            mine = ApiToken.objects.filter(user=request.user, pk=int(token_id))
            revoked = revoke_api_tokens(mine)
            if revoked:
                messages.success(request, "Token revoked.")
            return redirect("api-token")
        else:
            return HttpResponseBadRequest("unknown action")
    tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at")[:20]
    return render(request, "console/token.html", {"plain": plain, "tokens": tokens})
