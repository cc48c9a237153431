"""Webhooks never reach loopback, link-local, private or other non-public addresses
(notifications.outbound): the rule form refuses them with a field error, and delivery
refuses them again before connecting (a URL saved earlier, a DNS answer that changed).

Nothing here connects anywhere but 127.0.0.1: `console_loopback_only` fails any other
connection attempt, so a refusal that came after connecting would fail the test."""

import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import pytest
from django.utils import timezone

from notifications import outbound
from notifications.admin import RuleForm
from notifications.delivery import deliver_due
from notifications.models import Channel, Delivery, DeliveryStatus
from tests.notifications.conftest import Receiver

REFUSED = [
    "http://127.0.0.1:9999/hook",
    "http://[::1]/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1/hook",
    "http://192.168.1.10/hook",
    "http://172.16.0.1/hook",
    "http://100.64.0.1/hook",  # shared (carrier-grade NAT)
    "http://0.0.0.0/hook",
    "http://224.0.0.1/hook",
    "http://240.0.0.1/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[fe80::1]/hook",
    "http://[fc00::1]/hook",
    "http://localhost:9999/hook",  # a name: refused by what it resolves to
    # IPv6 forms that carry a non-public IPv4 (docs/fault-tolerance.md, "Outbound requests")
    "http://[2002:7f00:1::]/hook",  # 6to4 of 127.0.0.1
    "http://[2002:a9fe:a9fe::1]/hook",  # 6to4 of 169.254.169.254
    "http://[64:ff9b::a00:1]/hook",  # NAT64 of 10.0.0.1
    "http://[64:ff9b::7f00:1]/hook",  # NAT64 of 127.0.0.1
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",  # Teredo, client 127.0.0.1
    "http://[::127.0.0.1]/hook",  # IPv4-compatible
    "http://[::ffff:192.168.0.1]/hook",  # IPv4-mapped
]
LOOPBACK = {
    "http://127.0.0.1:9999/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://localhost:9999/hook",
}


@pytest.fixture
def console_loopback_only(monkeypatch):
    """Every connection attempt is recorded; one to a non-loopback address fails."""
    attempts: list[str] = []
    real_connect = socket.socket.connect

    def connect(sock, address):
        host = address[0]
        attempts.append(host)
        if host not in ("127.0.0.1", "::1"):
            raise AssertionError(f"the guard let a connection to {host} through")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return attempts


@pytest.fixture
def console_dns(monkeypatch):
    """Names the test gives an answer (DNS itself cannot be staged here)."""
    answers: dict[str, list[str]] = {}
    real = outbound.resolve

    def resolve(host: str, port: int) -> list[str]:
        return answers[host] if host in answers else real(host, port)

    monkeypatch.setattr(outbound, "resolve", resolve)
    return answers


def _delivery(url: str) -> Delivery:
    return Delivery.objects.create(
        channel=Channel.WEBHOOK,
        target=url,
        event="queued",
        payload={"event": "queued"},
        next_attempt_at=timezone.now(),
    )


def test_the_default_refuses_loopback(settings):
    assert settings.NOTIFY_ALLOW_LOOPBACK is False


@pytest.mark.parametrize("url", REFUSED)
def test_the_guard_refuses_each_non_public_address(url, settings):
    settings.NOTIFY_ALLOW_LOOPBACK = False
    with pytest.raises(outbound.RefusedDestination):
        outbound.vet(url)


@pytest.mark.parametrize("url", sorted(set(REFUSED) - LOOPBACK))
def test_the_loopback_switch_opens_loopback_only(url):
    with pytest.raises(outbound.RefusedDestination):
        outbound.vet(url, allow_loopback=True)


@pytest.mark.parametrize("url", sorted(LOOPBACK))
def test_the_loopback_switch_lets_loopback_through(url):
    assert outbound.vet(url, allow_loopback=True).addresses


@pytest.mark.parametrize(
    "url", ["ftp://93.184.216.34/x", "http://user:pw@93.184.216.34/x", "http:///x", "http://[::1"]
)
def test_other_bad_urls_are_refused(url):
    with pytest.raises(outbound.RefusedDestination):
        outbound.vet(url)


def test_a_public_address_is_vetted_without_connecting(console_loopback_only):
    destination = outbound.vet("https://93.184.216.34:8443/hook?x=1")
    assert destination.addresses == ("93.184.216.34",)
    assert destination.target == "/hook?x=1" and console_loopback_only == []


def test_a_name_is_refused_if_any_of_its_addresses_is_not_public(console_dns):
    console_dns["hooks.example.test"] = ["93.184.216.34", "10.0.0.1"]
    with pytest.raises(outbound.RefusedDestination, match=r"10\.0\.0\.1"):
        outbound.vet("http://hooks.example.test/hook")


@pytest.mark.django_db
@pytest.mark.parametrize("url", REFUSED)
def test_the_rule_form_refuses_them_with_a_field_error(url, workspace):
    form = RuleForm(
        data={"name": "hook", "channel": "webhook", "workspace": workspace.pk, "url": url}
    )
    assert not form.is_valid()
    assert "url" in form.errors, form.errors


@pytest.mark.django_db
def test_the_rule_form_takes_a_public_url(workspace, console_dns):
    console_dns["hooks.example.test"] = ["93.184.216.34"]
    form = RuleForm(
        data={
            "name": "hook",
            "channel": "webhook",
            "workspace": workspace.pk,
            "url": "https://hooks.example.test/in",
            "events": ["queued"],
            "enabled": "on",
        }
    )
    assert form.is_valid(), form.errors


@pytest.mark.django_db
@pytest.mark.parametrize("url", REFUSED)
def test_delivery_refuses_a_url_saved_earlier_before_connecting(url, console_loopback_only):
    delivery = _delivery(url)
    run = deliver_due()
    delivery.refresh_from_db()
    assert run.failed == 1 and delivery.status == DeliveryStatus.FAILED  # not retried
    assert delivery.last_error.startswith("RefusedDestination")
    assert console_loopback_only == []


@pytest.mark.django_db
def test_a_loopback_listener_hears_nothing_by_default(console_loopback_only):
    listener = Receiver()
    try:
        _delivery(listener.url)
        deliver_due()
        assert listener.requests == [] and console_loopback_only == []
    finally:
        listener.close()


@pytest.mark.django_db
def test_a_changed_dns_answer_is_refused_at_delivery(console_dns, console_loopback_only):
    console_dns["hooks.example.test"] = ["93.184.216.34"]  # when the rule was saved
    outbound.vet("http://hooks.example.test/hook")
    console_dns["hooks.example.test"] = ["169.254.169.254"]  # rebound since
    delivery = _delivery("http://hooks.example.test/hook")
    deliver_due()
    delivery.refresh_from_db()
    assert "169.254.169.254" in delivery.last_error and console_loopback_only == []


@pytest.mark.django_db
def test_the_connection_goes_to_the_vetted_address(settings, console_dns, console_loopback_only):
    """The name does not resolve for anyone but the guard: the receiver hearing the POST,
    with the name in Host, proves the client connected to the address it vetted."""
    settings.NOTIFY_ALLOW_LOOPBACK = True
    listener = Receiver()
    try:
        port = listener.server.server_address[1]
        console_dns["hooks.example.test"] = ["127.0.0.1"]
        delivery = _delivery(f"http://hooks.example.test:{port}/hook?k=1")
        run = deliver_due()
        delivery.refresh_from_db()
        assert run.delivered == 1, delivery.last_error
        [request] = listener.requests
        assert request["headers"]["Host"] == f"hooks.example.test:{port}"
        assert request["path"] == "/hook?k=1"
        assert console_loopback_only == ["127.0.0.1"]
    finally:
        listener.close()


class _Redirect(BaseHTTPRequestHandler):
    def do_POST(self):
        self.send_response(302)
        self.send_header("Location", "http://10.0.0.1/elsewhere")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.django_db
def test_a_redirect_is_never_followed(settings, console_loopback_only):
    settings.NOTIFY_ALLOW_LOOPBACK = True
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        delivery = _delivery(f"http://127.0.0.1:{server.server_address[1]}/hook")
        deliver_due()
        delivery.refresh_from_db()
        assert delivery.last_status_code == 302
        assert console_loopback_only == ["127.0.0.1"]
    finally:
        server.shutdown()
        server.server_close()
