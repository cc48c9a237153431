"""The pure address rules of the webhook guard (notifications.outbound): an IPv6 address
that carries an IPv4 one is judged by that IPv4 (docs/fault-tolerance.md, "Outbound
requests")."""

import ipaddress

import pytest

from notifications.outbound import embedded_ipv4, refusal

EMBEDDED = [
    ("::ffff:10.1.2.3", [("IPv4-mapped", "10.1.2.3")]),
    ("::127.0.0.1", [("IPv4-compatible", "127.0.0.1")]),
    ("2002:7f00:1::", [("6to4", "127.0.0.1")]),
    ("2002:c0a8:101::1", [("6to4", "192.168.1.1")]),
    ("64:ff9b::a9fe:a9fe", [("NAT64", "169.254.169.254")]),
    ("64:ff9b::8.8.8.8", [("NAT64", "8.8.8.8")]),
    (
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
        [("Teredo", "65.54.227.120"), ("Teredo", "127.0.0.1")],
    ),
    ("2606:4700::1111", []),
    ("::1", []),
    ("::", []),
    ("93.184.216.34", []),
]


@pytest.mark.parametrize(("text", "expected"), EMBEDDED)
def test_the_ipv4_an_address_carries(text, expected):
    found = embedded_ipv4(ipaddress.ip_address(text))
    assert [(form, str(inner)) for form, inner in found] == expected


# (address, allow_loopback, the refusal's words or "" when allowed)
VERDICTS = [
    ("93.184.216.34", False, ""),
    ("2606:4700::1111", False, ""),
    ("2002:808:808::1", False, ""),  # 6to4 of a public address
    ("64:ff9b::8.8.8.8", False, ""),  # NAT64 of a public address
    ("::ffff:127.0.0.1", False, "a loopback address"),
    ("::ffff:127.0.0.1", True, ""),  # the kernel connects to this host's loopback
    ("::ffff:10.0.0.1", True, "a private address"),
    ("2002:7f00:1::", False, "a 6to4 address embedding a loopback address"),
    ("2002:7f00:1::", True, "a 6to4 address embedding a loopback address"),
    ("2002:a00:1::", False, "a 6to4 address embedding a private address"),
    ("2002:a9fe:a9fe::", False, "a 6to4 address embedding a link-local address"),
    ("64:ff9b::7f00:1", True, "a NAT64 address embedding a loopback address"),
    ("64:ff9b::c0a8:1", False, "a NAT64 address embedding a private address"),
    ("64:ff9b:1::a00:1", False, "a local-use NAT64 address"),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", False, "a Teredo address embedding a loopback"),
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", False, "a private address"),  # client 8.8.8.8
    ("::127.0.0.1", False, "an IPv4-compatible address embedding a loopback address"),
    ("::10.0.0.1", True, "an IPv4-compatible address embedding a private address"),
    ("::1", True, ""),
    ("::1", False, "a loopback address"),
    ("::", False, "an unspecified address"),
    ("fe80::1", False, "a link-local address"),
]


@pytest.mark.parametrize(("text", "allow_loopback", "words"), VERDICTS)
def test_the_guard_judges_the_embedded_ipv4(text, allow_loopback, words):
    why = refusal(ipaddress.ip_address(text), allow_loopback)
    if words:
        assert why.startswith(words)
    else:
        assert why == ""
