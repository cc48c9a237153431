"""Sign-in with the organisation's identity provider, end to end (docs/sign-in.md): a real
OpenID Connect provider (django-oauth-toolkit, tests/oidc_provider) in a second process,
the console on the test's live server pointed at it by its issuer, and Chromium following
the real redirects: the console's button, the provider's login form, the callback. The
groups the provider names become memberships; a second sign-in after a group change
changes them; the ID token's signature is checked against the provider's keys."""

import json
import queue
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from jwt.algorithms import RSAAlgorithm

from accounts.models import ExternalIdentity
from audit.models import AuditEntry
from quotas import actions
from quotas.models import Membership, MembershipSource, Role, Tenant, Workspace
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.oidc_provider.harness import (
    PASSWORD,
    PROVIDER_NAME,
    enable_oidc,
    new_rsa_key_pem,
    running_provider,
)

pytestmark = pytest.mark.e2e

GROUP_ROLES = (
    "acme-owners=acme:owner,acme-vision=acme/vision:researcher,"
    "acme-speech=acme/speech:researcher,ghosts=acme/nowhere:admin"
)


class Chromium:
    """Chromium driven from a thread of its own (Playwright's sync API keeps an event loop
    in its thread, where Django refuses the ORM): `chromium(step)` runs `step(browser)`
    there and returns its result or raises its exception; the test's thread keeps the ORM."""

    def __init__(self) -> None:
        self._steps: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        ok, error = self._results.get(timeout=120)
        if not ok:
            raise error

    def _run(self) -> None:
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                self._results.put((True, None))
                while (step := self._steps.get()) is not None:
                    try:
                        self._results.put((True, step(browser)))
                    except BaseException as error:
                        self._results.put((False, error))
                browser.close()
        except BaseException as error:
            self._results.put((False, error))

    def __call__(self, step: Callable):
        self._steps.put(step)
        ok, value = self._results.get(timeout=180)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._steps.put(None)
        self._thread.join(60)


@pytest.fixture(scope="module")
def chromium():
    driver = Chromium()
    yield driver
    driver.close()


def new_page(chromium: Chromium):
    def step(browser):
        page = browser.new_context().new_page()
        page.set_default_timeout(30_000)
        return page

    return chromium(step)


@pytest.fixture(scope="module")
def provider(tmp_path_factory, live_server):
    folder = tmp_path_factory.mktemp("oidc-provider")
    with running_provider(folder, f"{live_server.url}/login/oidc/callback/") as running:
        yield running


@pytest.fixture
def oidc_on(settings, provider):
    enable_oidc(settings, provider.issuer, GROUP_ROLES)
    return provider


@pytest.fixture
def acme(transactional_db):
    tenant = actions.create_tenant("acme")
    return {
        "tenant": tenant,
        "vision": actions.create_workspace(tenant, "vision"),
        "speech": actions.create_workspace(tenant, "speech"),
        "other": actions.create_workspace(actions.create_tenant("globex"), "lab"),
    }


def sign_in(page, console_url: str, username: str, next_path: str = "") -> None:
    """From the console's sign-in page through the provider and back."""
    page.goto(f"{console_url}/login/" + (f"?next={next_path}" if next_path else ""))
    page.click(f"text=Sign in with {PROVIDER_NAME}")
    page.wait_for_load_state()
    if "/accounts/login/" in page.url:  # no session at the provider yet
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")


def sign_out(page, console_url: str) -> None:
    page.goto(f"{console_url}/")
    page.click("form.logout [type=submit]")
    page.wait_for_url("**/login/")


def roles_of(username: str) -> dict[str, tuple[str, str]]:
    return {
        str(m.workspace): (m.role, m.source)
        for m in Membership.objects.filter(user__username=username).select_related(
            "workspace__tenant"
        )
    }


def test_groups_become_memberships_and_follow_the_provider(chromium, live_server, oidc_on, acme):
    url = live_server.url
    oidc_on.user("carol", ["acme-vision", "unrelated"])
    page = new_page(chromium)

    # First sign-in: the account is made, its groups become a membership, `next` is kept.
    chromium(lambda b: sign_in(page, url, "carol", next_path="/usage/"))
    chromium(lambda b: page.wait_for_url(f"{url}/usage/"))
    assert roles_of("carol") == {"acme/vision": (Role.RESEARCHER, MembershipSource.PROVIDER)}
    identity = ExternalIdentity.objects.get(user__username="carol")
    assert identity.issuer == oidc_on.issuer and identity.user.email == "carol@example.com"
    assert not identity.user.has_usable_password()
    added = AuditEntry.objects.get(action="workspace.member_add", object_repr="acme/vision")
    assert added.actor_name == "carol"
    assert added.detail["changes"]["source"] == [None, "oidc"]
    new_quota = f"{url}/quotas/tenant/{acme['tenant'].pk}/new/"
    assert chromium(lambda b: page.goto(new_quota).status) == 403  # a researcher of acme

    # Meanwhile an owner adds carol to a workspace by hand, and her groups change at the
    # provider: the next sign-in (the provider's session still open: no form) follows
    # them and leaves the hand-made membership alone.
    actions.add_member(acme["other"], identity.user, Role.RESEARCHER)
    oidc_on.user("carol", ["acme-owners", "acme-speech", "ghosts"])
    chromium(lambda b: sign_out(page, url))
    chromium(lambda b: sign_in(page, url, "carol"))
    chromium(lambda b: page.wait_for_url(f"{url}/"))
    assert roles_of("carol") == {
        "acme/vision": (Role.QUOTA_OWNER, MembershipSource.PROVIDER),
        "acme/speech": (Role.QUOTA_OWNER, MembershipSource.PROVIDER),
        "globex/lab": (Role.RESEARCHER, MembershipSource.MANUAL),
    }
    assert chromium(lambda b: page.goto(new_quota).status) == 200  # an owner of acme now

    # Every group removed: the provider's memberships go, the hand-made one stays, and a
    # `next` to another site is not followed.
    oidc_on.user("carol", [])
    chromium(lambda b: sign_out(page, url))
    chromium(lambda b: page.goto(f"{url}/login/oidc/?next=https://elsewhere.example/"))
    chromium(lambda b: page.wait_for_url(f"{url}/"))
    assert roles_of("carol") == {"globex/lab": (Role.RESEARCHER, MembershipSource.MANUAL)}
    assert AuditEntry.objects.filter(action="workspace.member_remove").count() == 2
    assert ExternalIdentity.objects.count() == 1
    chromium(lambda b: page.context.close())


def test_a_person_without_mapped_groups_is_refused_with_the_reason(
    chromium, live_server, oidc_on, acme
):
    url = live_server.url
    oidc_on.user("dave", ["unrelated"])
    page = new_page(chromium)
    chromium(lambda b: sign_in(page, url, "dave"))
    chromium(lambda b: page.wait_for_url(f"{url}/login/"))
    assert "none of your groups gives you a workspace here" in chromium(lambda b: page.content())
    # The account exists now, so a quota owner can add it by hand.
    assert ExternalIdentity.objects.filter(user__username="dave").exists()
    refused = AuditEntry.objects.get(action="login.refused")
    assert refused.actor_name == "dave" and refused.detail["via"] == "oidc"
    chromium(lambda b: page.goto(f"{url}/"))
    assert "/login/" in chromium(lambda b: page.url)  # not signed in
    chromium(lambda b: page.context.close())


def test_a_staff_account_is_not_taken_over(chromium, live_server, oidc_on, acme, django_user_model):
    url = live_server.url
    django_user_model.objects.create_user("erin", password="local-password-1", is_staff=True)
    oidc_on.user("erin", ["acme-owners"])
    page = new_page(chromium)
    chromium(lambda b: sign_in(page, url, "erin"))
    chromium(lambda b: page.wait_for_url(f"{url}/login/"))
    assert "is a staff account" in chromium(lambda b: page.content())
    assert not ExternalIdentity.objects.exists() and not Membership.objects.exists()
    chromium(lambda b: page.context.close())


class _Keys(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def test_an_id_token_not_signed_by_the_published_key_is_refused(
    chromium, live_server, oidc_on, acme, settings
):
    """The same key id, another key: the signature check fails and nobody is signed in."""
    url = live_server.url
    published = requests.get(f"{oidc_on.issuer}/.well-known/jwks.json", timeout=5).json()
    other = serialization.load_pem_private_key(new_rsa_key_pem().encode(), password=None)
    forged = json.loads(RSAAlgorithm.to_jwk(other.public_key()))
    _Keys.body = json.dumps(
        {"keys": [{**key, "n": forged["n"], "e": forged["e"]} for key in published["keys"]]}
    ).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Keys)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.OIDC_JWKS_ENDPOINT = f"http://127.0.0.1:{server.server_port}/jwks.json"
    try:
        oidc_on.user("frank", ["acme-vision"])
        page = new_page(chromium)
        chromium(lambda b: sign_in(page, url, "frank"))
        chromium(lambda b: page.wait_for_url("**/login/oidc/callback/**"))
        assert "Bad Request" in chromium(lambda b: page.content())
        assert not ExternalIdentity.objects.exists()
        chromium(lambda b: page.goto(f"{url}/"))
        assert "/login/" in chromium(lambda b: page.url)
        chromium(lambda b: page.context.close())
    finally:
        server.shutdown()
        server.server_close()
    assert Tenant.objects.count() == 2 and Workspace.objects.count() == 3


def test_an_id_token_from_another_issuer_is_refused(chromium, live_server, oidc_on, settings):
    """Every endpoint given (no discovery), but the console expects another issuer than the
    one the provider signs as: refused with the reason audited."""
    found = requests.get(f"{oidc_on.issuer}/.well-known/openid-configuration", timeout=5).json()
    settings.OIDC_AUTHORIZATION_ENDPOINT = found["authorization_endpoint"]
    settings.OIDC_TOKEN_ENDPOINT = found["token_endpoint"]
    settings.OIDC_USERINFO_ENDPOINT = found["userinfo_endpoint"]
    settings.OIDC_JWKS_ENDPOINT = found["jwks_uri"]
    settings.OIDC_ISSUER = "https://id.example.com/expected"
    url = live_server.url
    oidc_on.user("gina", ["acme-vision"])
    page = new_page(chromium)
    chromium(lambda b: sign_in(page, url, "gina"))
    chromium(lambda b: page.wait_for_url(f"{url}/login/"))
    assert "not valid for this console" in chromium(lambda b: page.content())
    refused = AuditEntry.objects.get(action="login.refused")
    assert "issuer" in refused.detail["problems"][0]
    assert not ExternalIdentity.objects.exists()
    chromium(lambda b: page.context.close())
