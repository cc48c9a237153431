"""Site-level pages: home redirect, health check, and the researcher's API token page."""

import logging

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from accounts.actions import revoke_api_tokens, rotate_api_token
from accounts.login_limits import RateLimitedAuthenticationForm
from accounts.models import ApiToken
from audit.actions import record

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
        if action == "create":
            # Rotation: the new token replaces every live one of this user.
            live = list(ApiToken.objects.filter(user=request.user, revoked_at__isnull=True))
            token, plain = rotate_api_token(request.user)
            for old in live:
                _audit_token(request, "api_token.revoke", old, "replaced by a new token")
            _audit_token(request, "api_token.create", token, "")
        elif action == "revoke":
            token_id = request.POST.get("token", "")
            if not token_id.isdigit() or len(token_id) > 18:
                return HttpResponseBadRequest("token must be a token id")
            mine = ApiToken.objects.filter(user=request.user, pk=int(token_id))
            live = list(mine.filter(revoked_at__isnull=True))
            revoked = revoke_api_tokens(mine)
            if revoked:
                for token in live:
                    _audit_token(request, "api_token.revoke", token, "revoked by its owner")
                messages.success(request, "Token revoked.")
            return redirect("api-token")
        else:
            return HttpResponseBadRequest("unknown action")
    tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at")[:20]
    return render(request, "console/token.html", {"plain": plain, "tokens": tokens})


def _audit_token(request: HttpRequest, action: str, token: ApiToken, why: str) -> None:
    record(
        action,
        actor=request.user,
        object_type="api_token",
        object_id=token.pk,
        object_repr=f"gqc_{token.prefix}_… ({token.user.get_username()})",
        detail={"reason": why} if why else {},
    )


class LoginView(auth_views.LoginView):
    """Django's sign-in with attempts limited (accounts.login_limits): while refused it says
    so and answers 429."""

    authentication_form = RateLimitedAuthenticationForm
    redirect_authenticated_user = True

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.rate_limited:
            response.status_code = 429
            response["Retry-After"] = str(getattr(self.request, "login_retry_after", 60))
        return response
