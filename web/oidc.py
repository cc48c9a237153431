"""Sign-in with the organisation's OpenID Connect provider (docs/sign-in.md).

mozilla-django-oidc does the protocol: its views send the browser to the provider with a
state, a nonce and a PKCE challenge and check them on the way back; its backend exchanges
the code and checks the ID token's signature against the provider's published keys. Here:
the settings it reads (ours, from the environment; the endpoints from the issuer's
discovery document unless given), the ID token's claims checked (issuer, audience,
expiry), the account found or made (`accounts.actions.external_sign_in`), the groups turned
into memberships (`quotas.actions.sync_provider_memberships`), and a refusal said on the
sign-in page. Off (404) unless `OIDC_CLIENT_ID` is set.
"""

import logging
import time
from typing import Any

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from accounts.actions import external_sign_in
from audit.actions import record
from policy.oidc import id_token_problems, parse_group_roles, read_claims, wanted_memberships
from quotas.actions import sync_provider_memberships
from quotas.models import Membership, Workspace

log = logging.getLogger(__name__)

TIMEOUT = 10  # seconds for each request to the provider
DISCOVERY_TTL = 3600.0  # how long the discovery document is reused (seconds)

# The library's settings, read from ours.
_RENAMED = {
    "OIDC_RP_CLIENT_ID": "OIDC_CLIENT_ID",
    "OIDC_RP_CLIENT_SECRET": "OIDC_CLIENT_SECRET",
    "OIDC_RP_SCOPES": "OIDC_SCOPES",
    "OIDC_RP_SIGN_ALGO": "OIDC_SIGN_ALGO",
}
# The library's endpoint → (our setting, the discovery document's key).
_ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": ("OIDC_AUTHORIZATION_ENDPOINT", "authorization_endpoint"),
    "OIDC_OP_TOKEN_ENDPOINT": ("OIDC_TOKEN_ENDPOINT", "token_endpoint"),
    "OIDC_OP_USER_ENDPOINT": ("OIDC_USERINFO_ENDPOINT", "userinfo_endpoint"),
    "OIDC_OP_JWKS_ENDPOINT": ("OIDC_JWKS_ENDPOINT", "jwks_uri"),
}
# Decisions, not settings: PKCE and a nonce always, signatures from the provider's keys
# only, no `next` to another site, nothing of the provider's tokens kept in the session.
_FIXED: dict[str, Any] = {
    "OIDC_USE_PKCE": True,
    "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
    "OIDC_USE_NONCE": True,
    "OIDC_RP_IDP_SIGN_KEY": None,
    "OIDC_ALLOW_UNSECURED_JWT": False,
    "OIDC_VERIFY_KID": True,
    "OIDC_VERIFY_SSL": True,
    "OIDC_TIMEOUT": TIMEOUT,
    "OIDC_PROXY": None,
    "OIDC_REDIRECT_ALLOWED_HOSTS": [],
    "OIDC_REDIRECT_FIELD_NAME": "next",
    "OIDC_STORE_ACCESS_TOKEN": False,
    "OIDC_STORE_ID_TOKEN": False,
    "OIDC_TOKEN_USE_BASIC_AUTH": False,
    "OIDC_AUTH_REQUEST_EXTRA_PARAMS": {},
    "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc-callback",
}
_discovered: dict[str, tuple[float, dict]] = {}


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read or does not fit."""


def discovery() -> dict:
    """The issuer's OpenID configuration, fetched once an hour per process."""
    issuer = settings.OIDC_ISSUER
    cached = _discovered.get(issuer)
    if cached and time.monotonic() - cached[0] < DISCOVERY_TTL:
        return cached[1]
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as error:
        raise ProviderUnavailable(f"{url}: {error}") from error
    if not isinstance(document, dict) or document.get("issuer") != issuer:
        raise ProviderUnavailable(f"{url} is not the discovery document of {issuer}")
    _discovered[issuer] = (time.monotonic(), document)
    return document


def setting(name: str, *default: Any) -> Any:
    """A setting the library asks for, by its name."""
    if name in _FIXED:
        return _FIXED[name]
    if name in _RENAMED:
        return getattr(settings, _RENAMED[name])
    if name in _ENDPOINTS:
        ours, key = _ENDPOINTS[name]
        return getattr(settings, ours) or discovery().get(key, "")
    if name == "LOGIN_REDIRECT_URL_FAILURE":
        return reverse("login")
    return getattr(settings, name, *default)


def _endpoint(name: str) -> property:
    return property(lambda self: setting(name))


class ProviderBackend(OIDCAuthenticationBackend):
    """Signs in the person the provider vouches for; called only by the callback view."""

    get_settings = staticmethod(setting)
    # Read when used (they may need the discovery document), not each time Django loads
    # its backends for a password sign-in.
    OIDC_OP_TOKEN_ENDPOINT = _endpoint("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = _endpoint("OIDC_OP_USER_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT = _endpoint("OIDC_OP_JWKS_ENDPOINT")

    def __init__(self, *args, **kwargs) -> None:
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None

    def authenticate(self, request, **kwargs):
        # Only the callback passes a nonce: a password sign-in never reaches the provider.
        if request is None or "nonce" not in kwargs or not settings.OIDC_ENABLED:
            return None
        return super().authenticate(request, **kwargs)

    def get_user(self, user_id):
        return ModelBackend.get_user(self, user_id)  # a deactivated account is signed out

    def get_userinfo(self, access_token, id_token, payload) -> dict:
        """The ID token's claims with the user info endpoint's over them (groups may be
        in either); the user info must be about the token's subject."""
        if not self.OIDC_OP_USER_ENDPOINT:
            return dict(payload)
        info = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(info, dict) or info.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the user info is not about the ID token's subject")
        return {**payload, **info}

    def get_or_create_user(self, access_token, id_token, payload):
        problems = id_token_problems(
            payload,
            issuer=settings.OIDC_ISSUER,
            client_id=settings.OIDC_CLIENT_ID,
            now=time.time(),
        )
        if problems:
            log.warning("ID token refused: %s", "; ".join(problems))
            return self._refuse(
                "The identity provider's answer is not valid for this console.",
                "",
                problems=problems,
            )
        claims, refusal = read_claims(
            self.get_userinfo(access_token, id_token, payload),
            username_claim=settings.OIDC_USERNAME_CLAIM,
            groups_claim=settings.OIDC_GROUPS_CLAIM,
        )
        if claims is None:
            return self._refuse(refusal, "")
        with transaction.atomic():
            user, refusal = external_sign_in(settings.OIDC_ISSUER, claims)
            if user is None:
                return self._refuse(refusal, claims.username)
            if not user.is_active:
                return self._refuse("This console account is deactivated.", claims.username)
            sync_provider_memberships(user, wanted_roles(claims.groups), actor=user)
            if not (user.is_staff or Membership.objects.filter(user=user).exists()):
                return self._refuse(
                    f"{claims.username} signed in at {settings.OIDC_PROVIDER_NAME}, but none "
                    "of your groups gives you a workspace here. Ask a quota owner to add you.",
                    claims.username,
                )
        return user

    def _refuse(self, why: str, username: str, **detail: Any) -> None:
        """No sign-in: the callback view says why on the sign-in page; audited."""
        self.request.oidc_refusal = why
        record(
            "login.refused",
            actor_name=username,
            object_type="user",
            object_repr=username,
            detail={"via": "oidc", "reason": why, **detail},
        )
        return None


def wanted_roles(groups: tuple[str, ...]) -> dict[int, str]:
    """Workspace id → role that `groups` grant through `OIDC_GROUP_ROLES` (one query)."""
    grants = parse_group_roles(settings.OIDC_GROUP_ROLES)
    tenants = {grant.tenant for grant in grants if grant.group in set(groups)}
    if not tenants:
        return {}
    rows = Workspace.objects.filter(tenant__name__in=tenants).values_list(
        "pk", "tenant__name", "name"
    )
    wanted, missing = wanted_memberships(groups, grants, rows)
    if missing:
        log.warning("OIDC_GROUP_ROLES names workspaces that do not exist: %s", ", ".join(missing))
    return wanted


def _unavailable(request: HttpRequest, error: Exception) -> HttpResponse:
    log.warning("sign-in with the identity provider failed: %s", error)
    messages.error(
        request,
        f"{settings.OIDC_PROVIDER_NAME} could not be reached to sign you in. Try again later.",
    )
    return redirect("login")


class ProviderLogin(OIDCAuthenticationRequestView):
    """`/login/oidc/`: sends the browser to the provider (`next` is kept when on this site)."""

    get_settings = staticmethod(setting)

    def __init__(self, **kwargs) -> None:
        View.__init__(self, **kwargs)  # the endpoint is read in get()

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("sign-in with an identity provider is off")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except ProviderUnavailable as error:
            return _unavailable(request, error)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        return super().get(request)


class ProviderCallback(OIDCAuthenticationCallbackView):
    """`/login/oidc/callback/`: where the provider sends the browser back."""

    get_settings = staticmethod(setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("sign-in with an identity provider is off")
        try:
            return super().get(request)
        except (ProviderUnavailable, requests.RequestException) as error:
            return _unavailable(request, error)

    def login_failure(self) -> HttpResponse:
        wait = getattr(self.request, "login_retry_after", 0)  # accounts.login_limits
        why = getattr(self.request, "oidc_refusal", "") or (
            f"Too many failed sign-ins. Try again in {wait} seconds."
            if wait
            else f"Sign-in with {settings.OIDC_PROVIDER_NAME} did not complete. Try again."
        )
        messages.error(self.request, why)
        return super().login_failure()
