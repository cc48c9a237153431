"""Who is on the other end of a request: the client's network address.

Behind reverse proxies (`settings.TRUSTED_PROXY_HOPS` of them, each appending to
X-Forwarded-For) the client is the entry that many hops from the right; entries further
left were written by the client itself and prove nothing. Without proxies it is the
socket's peer (REMOTE_ADDR).
"""

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def _valid(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str:
    """The client's IP address as text, or "" when unknown."""
    hops = getattr(settings, "TRUSTED_PROXY_HOPS", 0)
    if hops > 0:
        forwarded = [
            part for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part
        ]
        if len(forwarded) >= hops:
            found = _valid(forwarded[-hops])
            if found:
                return found
    return _valid(request.META.get("REMOTE_ADDR", "")) or ""
