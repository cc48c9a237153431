"""Each request's source (address, web/API/admin, user agent) for the audit entries it
causes; after an admin POST, the admin history entries it wrote are mirrored, whoever the
admin let in (staff, and quota owners who are not staff: `console.admin_site`); a page
refused to a user who may not see its object (404 of an existing one) or take its action
(403) is recorded as denied access (`audit.denials`)."""

from collections.abc import Callable

from django.contrib.admin.models import LogEntry
from django.core.exceptions import PermissionDenied
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from accounts.addresses import client_address
from audit import context
from audit.actions import mirror_admin_entries
from audit.denials import record_denial
from audit.models import Via
from quotas.access import HiddenObject


def _via(path: str, admin_prefix: str) -> str:
    if path.startswith("/api/"):
        return Via.API
    if path.startswith(admin_prefix):
        return Via.ADMIN
    return Via.WEB


class AuditMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self._admin_prefix: str | None = None

    def admin_prefix(self) -> str:
        if self._admin_prefix is None:
            self._admin_prefix = reverse("admin:index")
        return self._admin_prefix

    def __call__(self, request: HttpRequest) -> HttpResponse:
        via = _via(request.path, self.admin_prefix())
        source = context.Source(
            address=client_address(request) or None,
            via=via,
            user_agent=request.headers.get("User-Agent", "")[:200],
        )
        token = context.enter(source)
        try:
            mark = None
            user = getattr(request, "user", None)
            signed_in = user is not None and user.is_authenticated
            if via == Via.ADMIN and request.method == "POST" and signed_in:
                mark = LogEntry.objects.aggregate(last=Max("pk"))["last"] or 0
            response = self.get_response(request)
            if mark is not None:
                mirror_admin_entries(request.user, mark)
            return response
        finally:
            context.leave(token)

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        """A view's refusal of a hidden object or a forbidden action (the API's are
        recorded by its own handlers, `api.main`); the response stays Django's."""
        if isinstance(exception, HiddenObject):
            record_denial(request, 404, exception.object_type, exception.object_id, "not visible")
        elif isinstance(exception, PermissionDenied):
            record_denial(request, 403, "page", request.path[:64], str(exception) or "forbidden")
