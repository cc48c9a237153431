"""Site-level pages: home redirect, health check, and the researcher's API token page."""

import logging

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from console.models import ApiToken

log = logging.getLogger(__name__)


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return redirect("jobs:list")


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
        now = timezone.now()
        live = ApiToken.objects.filter(user=request.user, revoked_at__isnull=True)
        if action == "create":
            with transaction.atomic():
                # Rotation: the new token replaces every live one of this user. Locking the
                # user row serialises two rotations, so exactly one token stays live.
                get_user_model().objects.select_for_update().filter(pk=request.user.pk).first()
                live.update(revoked_at=now)
                _, plain = ApiToken.issue(request.user)
        elif action == "revoke":
            token_id = request.POST.get("token", "")
            if not token_id.isdigit():
                return HttpResponseBadRequest("token must be a token id")
            revoked = live.filter(pk=int(token_id)).update(revoked_at=now)
            if revoked:
                messages.success(request, "Token revoked.")
            return redirect("api-token")
        else:
            return HttpResponseBadRequest("unknown action")
    tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at")[:20]
    return render(request, "console/token.html", {"plain": plain, "tokens": tokens})
