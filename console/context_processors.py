"""Template context every page needs: what the signed-in user may do (the navigation)."""

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject


def roles(request: HttpRequest) -> dict:
    """`console_roles.quota_owner`: evaluated (one query) only when a template asks."""

    def load() -> dict:
        from quotas.access import is_quota_owner

        user = getattr(request, "user", None)
        return {"quota_owner": bool(user and user.is_authenticated and is_quota_owner(user))}

    return {"console_roles": SimpleLazyObject(load)}
