"""Account pages: sign-in (attempts limited) and the researcher's API token."""

import logging

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from accounts.actions import revoke_api_tokens, rotate_api_token
from accounts.login_limits import RateLimitedAuthenticationForm
from accounts.models import ApiToken
from audit.actions import record

log = logging.getLogger(__name__)


NEW_TOKEN_COOKIE = "new_api_token"


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def api_token(request: HttpRequest) -> HttpResponse:
    """Create, rotate (after a confirmation) or revoke the user's API token.

    POST-redirect-GET: a reload never rotates again. The new plain token travels from the
    POST to the one GET that shows it in a signed, HttpOnly cookie scoped to this page
    that lives two minutes and is deleted by that GET; it is never written to the
    database (sessions live there) and never shown twice.
    """
    if request.method == "POST":
        return _token_post(request)
    plain = request.get_signed_cookie(NEW_TOKEN_COOKIE, default=None, max_age=120)
    tokens = list(ApiToken.objects.filter(user=request.user).order_by("-created_at")[:20])
    live = [t for t in tokens if t.revoked_at is None]
    context = {
        "plain": plain,
        "tokens": tokens,
        "live": live,
        "confirm_rotate": request.GET.get("confirm") == "rotate" and bool(live) and not plain,
    }
    response = render(request, "web/account/token.html", context)
    if NEW_TOKEN_COOKIE in request.COOKIES:
        response.delete_cookie(NEW_TOKEN_COOKIE, path=reverse("api-token"))
    return response


def _token_post(request: HttpRequest) -> HttpResponse:
    action = request.POST.get("action")
    if action == "create":
        live = ApiToken.objects.filter(user=request.user, revoked_at__isnull=True).exists()
        if live and request.POST.get("confirm") != "yes":
            # Rotation revokes the token scripts use now: ask first.
            return redirect(reverse("api-token") + "?confirm=rotate")
        # Rotation: the new token replaces every live one of this user.
        replaced = list(ApiToken.objects.filter(user=request.user, revoked_at__isnull=True))
        token, plain = rotate_api_token(request.user)
        for old in replaced:
            _audit_token(request, "api_token.revoke", old, "replaced by a new token")
        _audit_token(request, "api_token.create", token, "")
        response = redirect("api-token")
        response.set_signed_cookie(
            NEW_TOKEN_COOKIE,
            plain,
            max_age=120,
            path=reverse("api-token"),
            secure=settings.SESSION_COOKIE_SECURE,
            httponly=True,
            samesite="Strict",
        )
        messages.success(request, "New token created; earlier tokens were revoked.")
        return response
    if action == "revoke":
        token_id = request.POST.get("token", "")
        if not (token_id.isascii() and token_id.isdigit()) or len(token_id) > 18:
            return HttpResponseBadRequest("token must be a token id")
        mine = ApiToken.objects.filter(user=request.user, pk=int(token_id))
        live = list(mine.filter(revoked_at__isnull=True))
        if revoke_api_tokens(mine):
            for token in live:
                _audit_token(request, "api_token.revoke", token, "revoked by its owner")
            messages.success(request, "Token revoked.")
        return redirect("api-token")
    return HttpResponseBadRequest("unknown action")


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
    so and answers 429. With the identity provider on, it offers that too (web.oidc)."""

    template_name = "web/account/login.html"
    authentication_form = RateLimitedAuthenticationForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["oidc_provider"] = settings.OIDC_PROVIDER_NAME if settings.OIDC_ENABLED else ""
        return context

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.rate_limited:
            response.status_code = 429
            response["Retry-After"] = str(getattr(self.request, "login_retry_after", 60))
        return response
