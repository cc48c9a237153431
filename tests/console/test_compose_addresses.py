"""The production compose file's fixed addresses can never be drawn by another container.

podman's address pool remembers where it stopped across restarts and even across the
network's removal, so a container that restarts often (web) walks the whole subnet; when
it drew caddy's fixed address, caddy could not start ("requested ip address … is already
allocated"), and a container holding that address would be trusted as caddy
(FORWARDED_ALLOW_IPS). The fixed addresses therefore lie outside the range the pool draws
from (`ip_range`).
"""

import ipaddress
import re
from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def with_defaults(value):
    """`${NAME:-default}` as compose resolves it with NAME unset."""
    if isinstance(value, str):
        return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)
    if isinstance(value, dict):
        return {k: with_defaults(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_defaults(v) for v in value]
    return value


def fixed_addresses(compose: dict) -> list[tuple[str, str, str]]:
    found = []
    for service, spec in compose["services"].items():
        networks = spec.get("networks") or {}
        if isinstance(networks, dict):
            for network, options in networks.items():
                if options and options.get("ipv4_address"):
                    found.append((service, network, options["ipv4_address"]))
    return found


def drawable(compose: dict) -> list[str]:
    """The fixed addresses another container could be given, each with why."""
    problems = []
    for service, network, address in fixed_addresses(compose):
        ip = ipaddress.ip_address(address)
        pools = compose["networks"][network]["ipam"]["config"]
        pool = next((p for p in pools if ip in ipaddress.ip_network(p["subnet"])), None)
        if pool is None:
            problems.append(f"{service}: {address} outside {network}'s subnets")
        elif "ip_range" not in pool:
            problems.append(f"{service}: {network} has no ip_range, {address} can be drawn")
        elif ip in ipaddress.ip_network(pool["ip_range"]):
            problems.append(f"{service}: {address} inside {network}'s ip_range")
    return problems


def test_every_fixed_address_is_in_its_subnet_and_outside_the_drawn_range():
    compose = with_defaults(yaml.safe_load(COMPOSE.read_text()))
    assert [s for s, _, _ in fixed_addresses(compose)] == ["caddy"]
    assert drawable(compose) == []


def test_the_check_catches_a_missing_or_overlapping_range():
    compose = with_defaults(yaml.safe_load(COMPOSE.read_text()))
    pool = compose["networks"]["edge"]["ipam"]["config"][0]
    pool["ip_range"] = pool["subnet"]
    assert drawable(compose) == ["caddy: 172.30.213.14 inside edge's ip_range"]
    del pool["ip_range"]
    assert drawable(compose) == ["caddy: edge has no ip_range, 172.30.213.14 can be drawn"]


def test_web_trusts_exactly_caddys_fixed_address():
    compose = with_defaults(yaml.safe_load(COMPOSE.read_text()))
    caddy = compose["services"]["caddy"]["networks"]["edge"]["ipv4_address"]
    assert compose["services"]["web"]["environment"]["FORWARDED_ALLOW_IPS"] == caddy
