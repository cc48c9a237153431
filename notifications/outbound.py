"""The one way the console sends a request outside itself (webhooks): a guarded client.

A URL is vetted before anything connects: http or https only, no user:password, and every
address its host resolves to must be a public one (not loopback, link-local, private,
shared, multicast, reserved or unspecified; IPv4-mapped IPv6 is judged as the IPv4 inside).
The connection then goes to the vetted address itself, with the URL's host in `Host` (and
in TLS's SNI and certificate check), so a second DNS answer (rebinding) cannot swap the
destination. Redirects are never followed: a 3xx is the receiver's answer.

`NOTIFY_ALLOW_LOOPBACK` (off by default) lets loopback addresses through, and only those:
for the tests' local receivers and an operator who deliberately runs a receiver on the
console's own host. See docs/fault-tolerance.md ("Outbound requests").
"""

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import certifi
import urllib3
from django.conf import settings

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


class RefusedDestination(ValueError):
    """The URL may not be requested (its message says why, for a field error or a log)."""


class ResolveFailed(RefusedDestination):
    """The host does not resolve (now): worth another try later, unlike a refusal."""


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str  # as written in the URL (for Host, SNI and the certificate)
    port: int
    target: str  # path and query
    addresses: tuple[str, ...]  # vetted, in the resolver's order


@dataclass(frozen=True)
class OutboundResponse:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case
    text: str = ""


def system_resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolveFailed(f"host {host!r} does not resolve: {exc}") from None
    return [str(info[4][0]) for info in infos]


# Tests replace this to give a name a chosen answer (DNS itself cannot be staged here).
resolve: Resolver = system_resolve


def refusal(address: IpAddress, allow_loopback: bool) -> str:
    """Why `address` may not be contacted, or "" when it may (pure)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "" if allow_loopback else "a loopback address"
    for kind, flag in (
        ("an unspecified address", address.is_unspecified),
        ("a link-local address", address.is_link_local),
        ("a multicast address", address.is_multicast),
        ("a private address", address.is_private),
        ("a reserved address", address.is_reserved),
        ("not a public address", not address.is_global),
    ):
        if flag:
            return kind
    return ""


def vet(url: str, *, allow_loopback: bool | None = None) -> Destination:
    """The destination of `url` with its vetted addresses; RefusedDestination otherwise."""
    if allow_loopback is None:
        allow_loopback = settings.NOTIFY_ALLOW_LOOPBACK
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise RefusedDestination(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise RefusedDestination("only http and https URLs are allowed")
    if parts.username is not None or parts.password is not None:
        raise RefusedDestination("credentials in the URL are not allowed (use the secret)")
    host = parts.hostname or ""
    if not host:
        raise RefusedDestination("the URL has no host")
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    found = [str(literal)] if literal is not None else resolve(host, port)
    if not found:
        raise ResolveFailed(f"host {host!r} has no address")
    for text in found:
        why = refusal(ipaddress.ip_address(text.split("%")[0]), allow_loopback)
        if why:
            shown = host if literal is not None else f"{host} ({text})"
            raise RefusedDestination(f"{shown} is {why}; webhooks go to public addresses only")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return Destination(parts.scheme, host, port, target, tuple(dict.fromkeys(found)))


def _pool(destination: Destination, address: str, timeout: float) -> urllib3.HTTPConnectionPool:
    options = {"timeout": urllib3.Timeout(total=timeout), "retries": False, "maxsize": 1}
    if destination.scheme == "https":
        return urllib3.HTTPSConnectionPool(
            address,
            destination.port,
            server_hostname=destination.host,
            assert_hostname=destination.host,
            cert_reqs="CERT_REQUIRED",
            ca_certs=certifi.where(),
            **options,
        )
    return urllib3.HTTPConnectionPool(address, destination.port, **options)


def post(url: str, body: bytes, headers: dict[str, str], *, timeout: float) -> OutboundResponse:
    """POST `body` to `url` through the guard. Raises RefusedDestination before any
    connection for a refused URL, urllib3's HTTPError when the transport fails."""
    destination = vet(url)
    default_port = 443 if destination.scheme == "https" else 80
    host = destination.host if ":" not in destination.host else f"[{destination.host}]"
    if destination.port != default_port:
        host += f":{destination.port}"
    last_error: Exception | None = None
    for address in destination.addresses:  # the vetted ones, nothing resolved again
        with _pool(destination, address, timeout) as pool:
            try:
                response = pool.urlopen(
                    "POST",
                    destination.target,
                    body=body,
                    headers={**headers, "Host": host},
                    redirect=False,
                    retries=False,
                    assert_same_host=False,
                )
            except urllib3.exceptions.NewConnectionError as exc:
                last_error = exc  # the next vetted address may answer
                continue
            return OutboundResponse(
                response.status,
                {name.lower(): value for name, value in response.headers.items()},
                response.data[:2000].decode("utf-8", "replace"),
            )
    raise last_error or urllib3.exceptions.HTTPError("no address to connect to")
