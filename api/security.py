"""Who is calling the API, and how often: bearer tokens with a per-token rate limit.

A request without a valid token is a 401; presenting a bad one is also counted against the
client's address (`API_AUTH_FAILURES_PER_ADDRESS`), and past that limit it is a 429, so
guessing costs time. A refused credential is recorded in the audit log as denied access.
A signed-in console user's session also authenticates, with Django's CSRF check on every
request (so the interactive docs' "Try it out" works in the browser that is signed in; a
cross-site page cannot forge a request), under the same per-user rate limit.
"""

from django.http import HttpRequest
from ninja.security import SessionAuth
from ninja.security.http import HttpBearer

from accounts import ratelimit
from accounts.addresses import client_address
from accounts.api_auth import ApiError, authenticate_token

TOKEN_SCOPE = "api-token"
SESSION_SCOPE = "api-session"
FAILURE_SCOPE = "api-auth-failure"


def rate_limited(verdict: ratelimit.Verdict, what: str) -> ApiError:
    return ApiError(
        429,
        "rate_limited",
        f"Too many {what}: at most {verdict.limit}. Retry in {verdict.retry_after} s.",
        headers={
            "Retry-After": str(verdict.retry_after),
            "X-RateLimit-Limit": str(verdict.limit.count),
            "X-RateLimit-Remaining": "0",
        },
    )


class TokenAuth(HttpBearer):
    """`Authorization: Bearer gqc_…` (create one on the console's API token page)."""

    def __call__(self, request: HttpRequest):
        header = request.headers.get("Authorization", "")
        token = authenticate_token(header)
        if token is None:
            if header:
                self._failed(request)
            return None
        verdict = ratelimit.hit(
            TOKEN_SCOPE, str(token.pk), ratelimit.setting_limit("API_RATE_LIMIT")
        )
        if not verdict.allowed:
            raise rate_limited(verdict, "requests with this token")
        request.user = token.user
        request.api_token = token
        request.rate_verdict = verdict
        return token.user

    def authenticate(self, request: HttpRequest, token: str):  # pragma: no cover - unused
        raise NotImplementedError

    def _failed(self, request: HttpRequest) -> None:
        limit = ratelimit.setting_limit("API_AUTH_FAILURES_PER_ADDRESS")
        verdict = ratelimit.hit(FAILURE_SCOPE, client_address(request), limit)
        request.auth_failure_limited = not verdict.allowed
        if not verdict.allowed:
            raise rate_limited(verdict, "requests with invalid tokens from your address")


class ConsoleSession(SessionAuth):
    """The console's session cookie plus its CSRF token (ninja checks it: `csrf=True`)."""

    def _get_key(self, request: HttpRequest) -> str | None:
        # No session cookie: not this scheme's request, so no CSRF verdict (a POST without
        # any credential stays a 401, not a 403).
        if self.param_name not in request.COOKIES:
            return None
        return super()._get_key(request)

    def authenticate(self, request: HttpRequest, key: str | None):
        user = super().authenticate(request, key)
        if user is None:
            return None
        verdict = ratelimit.hit(
            SESSION_SCOPE, str(user.pk), ratelimit.setting_limit("API_RATE_LIMIT")
        )
        if not verdict.allowed:
            raise rate_limited(verdict, "requests from this session")
        request.rate_verdict = verdict
        return user
