"""Sign-in attempts limited per username and per client address (console and admin).

`RateLimitedModelBackend` refuses to check a password once either counter is over its
limit; every failed attempt (wrong password or refused) is counted from Django's
`user_login_failed` signal. A success does not reset the address counter (one address
guessing many accounts stays limited) but clears the username's.
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest

from accounts import ratelimit
from accounts.addresses import client_address

USER_SCOPE = "login-user"
ADDRESS_SCOPE = "login-address"


def _limits() -> tuple[ratelimit.Limit, ratelimit.Limit]:
    return (
        ratelimit.setting_limit("LOGIN_FAILURES_PER_USER"),
        ratelimit.setting_limit("LOGIN_FAILURES_PER_ADDRESS"),
    )


def _username(credentials: dict) -> str:
    field = get_user_model().USERNAME_FIELD
    return str(credentials.get(field) or credentials.get("username") or "").strip().lower()


def blocked_for(request: HttpRequest | None, username: str) -> int:
    """Seconds until this sign-in may be tried again, 0 when it may be tried now."""
    per_user, per_address = _limits()
    waits = []
    if username:
        verdict = ratelimit.peek(USER_SCOPE, username, per_user)
        if not verdict.allowed:
            waits.append(verdict.retry_after)
    if request is not None:
        verdict = ratelimit.peek(ADDRESS_SCOPE, client_address(request), per_address)
        if not verdict.allowed:
            waits.append(verdict.retry_after)
    return max(waits, default=0)


def note_failure(sender, credentials: dict, request: HttpRequest | None = None, **kwargs):
    """`user_login_failed` receiver: one more failure for the username and the address."""
    per_user, per_address = _limits()
    username = _username(credentials)
    if username:
        ratelimit.hit(USER_SCOPE, username, per_user)
    if request is not None:
        ratelimit.hit(ADDRESS_SCOPE, client_address(request), per_address)


def note_success(sender, request: HttpRequest | None, user, **kwargs) -> None:
    """`user_logged_in` receiver: the account's failures are forgiven."""
    per_user, _ = _limits()
    ratelimit.reset(USER_SCOPE, user.get_username().strip().lower(), per_user)


class RateLimitedModelBackend(ModelBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        wait = blocked_for(request, _username({"username": username, **kwargs}))
        if wait:
            if request is not None:
                request.login_retry_after = wait
            raise PermissionDenied(f"too many failed sign-ins; retry in {wait}s")
        return super().authenticate(request, username=username, password=password, **kwargs)


class RateLimitedAuthenticationForm(AuthenticationForm):
    """Says why a sign-in is refused while the limit holds (instead of "wrong password")."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "rate_limited": "Too many failed sign-ins. Try again in %(seconds)s seconds.",
    }

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            wait = getattr(self.request, "login_retry_after", 0)
            if wait:
                raise ValidationError(
                    self.error_messages["rate_limited"],
                    code="rate_limited",
                    params={"seconds": wait},
                ) from None
            raise

    @property
    def rate_limited(self) -> bool:
        return any(e.code == "rate_limited" for e in self.non_field_errors().as_data())


def admin_login_form():
    """The admin site's login form with the same limits and message (set by the shell)."""
    from django.contrib.admin.forms import AdminAuthenticationForm

    class RateLimitedAdminAuthenticationForm(
        RateLimitedAuthenticationForm, AdminAuthenticationForm
    ):
        pass

    return RateLimitedAdminAuthenticationForm
