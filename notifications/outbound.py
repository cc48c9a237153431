"""The one way the console sends a request outside itself (webhooks): a guarded client.

A URL is vetted before anything connects: http or https only, no user:password, and every
address its host resolves to must be a public one (not loopback, link-local, private,
shared, multicast, reserved or unspecified; an IPv6 address carrying an IPv4 one, i.e.
IPv4-mapped, IPv4-compatible, 6to4, NAT64 or Teredo, is judged by the IPv4 inside too).
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


NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the IPv4 in the last 32 bits
LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: the operator's own
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated ::a.b.c.d (not :: or ::1)
TRANSLATED = frozenset({"NAT64", "6to4"})


def embedded_ipv4(address: IpAddress) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, with the form that carries them (pure):
    IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), 6to4 (`2002::/16`),
    NAT64 (`64:ff9b::/96`) and Teredo (`2001::/32`: its server and its client)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    if address.ipv4_mapped is not None:
        return [("IPv4-mapped", address.ipv4_mapped)]
    if address.sixtofour is not None:
        return [("6to4", address.sixtofour)]
    if address.teredo is not None:
        server, client = address.teredo
        return [("Teredo", server), ("Teredo", client)]
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in NAT64:
        return [("NAT64", low)]
    if address in IPV4_COMPATIBLE and int(address) > 1:
        return [("IPv4-compatible", low)]
    return []


def _plain_refusal(address: IpAddress, allow_loopback: bool) -> str:
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


def refusal(address: IpAddress, allow_loopback: bool) -> str:
    """Why `address` may not be contacted, or "" when it may (pure). An IPv6 address that
    carries an IPv4 one (`embedded_ipv4`) is judged by that IPv4 too: IPv4-mapped as the
    IPv4 itself (the kernel connects to it); a tunnel form (6to4, NAT64, Teredo,
    IPv4-compatible) embedding a non-public IPv4 is refused even where loopback is allowed,
    as it leads elsewhere than this host's loopback. NAT64 and 6to4 of a public IPv4 are
    allowed (an IPv6-only network reaches IPv4 hosts that way); Teredo and IPv4-compatible
    ones are judged as IPv6 addresses after that (not public)."""
    if isinstance(address, ipaddress.IPv6Address) and address in LOCAL_NAT64:
        return "a local-use NAT64 address"
    for form, inner in embedded_ipv4(address):
        why = _plain_refusal(inner, allow_loopback and form == "IPv4-mapped")
        if form == "IPv4-mapped":
            return why
        if why:
            article = "an" if form[0] in "AEIOU" else "a"
            return f"{article} {form} address embedding {why}"
    if any(form in TRANSLATED for form, _ in embedded_ipv4(address)):
        return ""  # a translator (DNS64) or 6to4 relay in front of a public IPv4
    return _plain_refusal(address, allow_loopback)


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
