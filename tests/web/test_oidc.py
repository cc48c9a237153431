"""Sign-in with the identity provider without the provider (docs/sign-in.md): off by
default, the settings' checks, the group mapping, the ID token's claims, the accounts and
memberships a sign-in writes, and the way out to the provider (state, nonce, PKCE). The
whole flow against a real provider is tests/e2e/test_oidc_sign_in.py."""

import os
import subprocess
import sys
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.actions import external_sign_in
from accounts.models import ExternalIdentity
from audit.models import AuditEntry
from console.oidc_settings import check_oidc_settings
from policy import oidc as policy
from quotas import actions
from quotas.models import Membership, MembershipSource, Role
from tests.oidc_provider.harness import PROVIDER_NAME, ROOT, enable_oidc, free_port
from web.oidc import wanted_roles

ISSUER = "https://id.example.com/realms/acme"


@pytest.fixture
def oidc_on(settings):
    """On, with every endpoint given (nothing is fetched from the issuer)."""
    enable_oidc(
        settings,
        ISSUER,
        "acme-owners=acme:owner,acme-vision=acme/vision:researcher",
        OIDC_AUTHORIZATION_ENDPOINT=f"{ISSUER}/authorize",
        OIDC_TOKEN_ENDPOINT=f"{ISSUER}/token",
        OIDC_USERINFO_ENDPOINT=f"{ISSUER}/userinfo",
        OIDC_JWKS_ENDPOINT=f"{ISSUER}/jwks",
    )


# -- off by default ------------------------------------------------------------------------


def test_off_by_default_the_sign_in_page_and_urls_are_as_before(client, db, settings):
    assert settings.OIDC_ENABLED is False
    assert settings.AUTHENTICATION_BACKENDS == ["accounts.login_limits.RateLimitedModelBackend"]
    page = client.get(reverse("login"))
    assert page.status_code == 200 and "Sign in with" not in page.text
    assert client.get("/login/oidc/").status_code == 404
    assert client.get("/login/oidc/callback/?code=x&state=y").status_code == 404


def test_on_the_sign_in_page_offers_the_provider_beside_the_password(client, db, oidc_on):
    page = client.get(reverse("login") + "?next=/usage/")
    assert f"Sign in with {PROVIDER_NAME}" in page.text
    assert 'href="/login/oidc/?next=/usage/"' in page.text
    assert 'name="password"' in page.text


def test_the_password_still_signs_in_with_the_provider_on(client, researcher, oidc_on):
    response = client.post(
        reverse("login"), {"username": "alice", "password": "correct-horse-battery"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("home")


# -- the way out and back ------------------------------------------------------------------


def test_the_way_out_carries_state_nonce_and_a_pkce_challenge(client, db, oidc_on):
    response = client.get("/login/oidc/?next=/usage/")
    assert response.status_code == 302
    target = urlsplit(response["Location"])
    query = {k: v[0] for k, v in parse_qs(target.query).items()}
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{ISSUER}/authorize"
    assert query["response_type"] == "code" and query["client_id"] == "gpu-console"
    assert query["redirect_uri"] == "http://testserver/login/oidc/callback/"
    assert query["scope"] == "openid email profile groups"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    kept = client.session["oidc_states"][query["state"]]
    assert kept["nonce"] == query["nonce"] and len(kept["code_verifier"]) == 64
    assert client.session["oidc_login_next"] == "/usage/"


def test_a_next_to_another_site_is_not_kept(client, db, oidc_on):
    client.get("/login/oidc/?next=https://elsewhere.example/")
    assert client.session["oidc_login_next"] is None


def test_a_callback_without_its_state_is_refused(client, db, oidc_on):
    client.get("/login/oidc/")
    assert client.get("/login/oidc/callback/?code=abc&state=forged").status_code == 400


def test_a_callback_with_the_providers_error_says_so(client, db, oidc_on):
    response = client.get("/login/oidc/callback/?error=access_denied", follow=True)
    assert response.redirect_chain[-1][0] == reverse("login")
    assert f"Sign-in with {PROVIDER_NAME} did not complete" in response.text


def test_an_address_over_its_sign_in_limit_is_refused_before_the_provider(
    client, db, oidc_on, settings
):
    settings.LOGIN_FAILURES_PER_ADDRESS = "2/300"
    with time_machine.travel(timezone.now(), tick=False):
        state = parse_qs(urlsplit(client.get("/login/oidc/")["Location"]).query)["state"][0]
        for name in ("x1", "x2"):
            client.post(reverse("login"), {"username": name, "password": "nope"})
        # The token endpoint does not exist: reaching it would fail differently.
        response = client.get(f"/login/oidc/callback/?code=abc&state={state}", follow=True)
    assert response.redirect_chain[-1][0] == reverse("login")
    assert "Too many failed sign-ins. Try again in" in response.text
    assert not client.session.get("_auth_user_id")


def test_an_unreachable_provider_is_said_on_the_sign_in_page(client, db, settings):
    enable_oidc(settings, f"http://127.0.0.1:{free_port()}/o", "")
    response = client.get("/login/oidc/", follow=True)
    assert response.redirect_chain[-1][0] == reverse("login")
    assert f"{PROVIDER_NAME} could not be reached" in response.text


# -- settings ------------------------------------------------------------------------------


def test_the_settings_are_checked_at_start():
    good = {
        "issuer": ISSUER,
        "secret": "s",
        "algorithm": "RS256",
        "scopes": "openid email",
        "group_roles": "g=acme:owner",
    }
    check_oidc_settings(**good)
    for change, says in [
        ({"issuer": ""}, "OIDC_ISSUER"),
        ({"secret": ""}, "OIDC_CLIENT_SECRET"),
        ({"algorithm": "HS256"}, "OIDC_SIGN_ALGO"),
        ({"scopes": "email"}, "OIDC_SCOPES must include openid"),
        ({"group_roles": "g=acme:boss"}, "OIDC_GROUP_ROLES"),
    ]:
        with pytest.raises(ImproperlyConfigured, match=says):
            check_oidc_settings(**{**good, **change})


def _settings_from(env: dict[str, str]) -> subprocess.CompletedProcess:
    probe = "from django.conf import settings; print(settings.AUTHENTICATION_BACKENDS)"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OIDC_")}
    return subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {probe}"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "console.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_environment_turns_it_on_and_a_bad_mapping_stops_the_start():
    env = {
        "OIDC_CLIENT_ID": "console",
        "OIDC_CLIENT_SECRET": "secret",
        "OIDC_ISSUER": ISSUER,
        "OIDC_GROUP_ROLES": "acme-owners=acme:owner",
    }
    on = _settings_from(env)
    assert on.returncode == 0 and "web.oidc.ProviderBackend" in on.stdout, on.stderr
    bad = _settings_from({**env, "OIDC_GROUP_ROLES": "acme-owners=acme"})
    assert bad.returncode != 0 and "not GROUP=TENANT[/WORKSPACE]:ROLE" in bad.stderr


# -- the pure part -------------------------------------------------------------------------


def test_the_mapping_format():
    grants = policy.parse_group_roles(
        " acme-owners = acme:owner , acme-vision=acme/vision:researcher,ops=acme:admin "
    )
    assert grants == (
        policy.GroupGrant("acme-owners", "acme", None, "quota_owner"),
        policy.GroupGrant("acme-vision", "acme", "vision", "researcher"),
        policy.GroupGrant("ops", "acme", None, "admin"),
    )
    # Group names with commas or "=" (LDAP names): entries separated by ";" or new lines.
    dn = "cn=vision,ou=groups,dc=acme"
    assert policy.parse_group_roles(f"{dn}=acme/vision:researcher;\nx=acme:owner") == (
        policy.GroupGrant(dn, "acme", "vision", "researcher"),
        policy.GroupGrant("x", "acme", None, "quota_owner"),
    )
    assert policy.parse_group_roles("") == ()
    with pytest.raises(ValueError) as refused:
        policy.parse_group_roles("a=acme,b=acme/:owner,c=acme:boss,=acme:owner")
    assert str(refused.value).count("'") == 8  # every bad entry named


def test_the_roles_are_the_models():
    assert tuple(Role.values) == policy.ROLES
    assert policy.PROVIDER == MembershipSource.PROVIDER


def test_the_groups_grant_the_highest_role_per_workspace():
    grants = policy.parse_group_roles(
        "owners=acme:owner,vision=acme/vision:researcher,ops=acme/speech:admin,gone=acme/x:admin"
    )
    spaces = [(1, "acme", "vision"), (2, "acme", "speech"), (3, "globex", "lab")]
    assert policy.wanted_memberships(["vision"], grants, spaces) == ({1: "researcher"}, [])
    assert policy.wanted_memberships(["vision", "owners", "ops", "gone"], grants, spaces) == (
        {1: "quota_owner", 2: "admin"},
        ["acme/x"],
    )
    assert policy.wanted_memberships(["other"], grants, spaces) == ({}, [])


def test_a_sign_in_changes_only_the_providers_memberships():
    current = {1: ("researcher", "oidc"), 2: ("researcher", "manual"), 3: ("admin", "oidc")}
    plan = policy.plan_sync({1: "quota_owner", 2: "admin", 4: "researcher"}, current)
    assert plan == policy.SyncPlan(add={4: "researcher"}, change={1: "quota_owner"}, remove=(3,))
    assert not policy.plan_sync({1: "researcher"}, {1: ("researcher", "oidc")})


def test_the_id_tokens_claims_are_checked():
    now = time.time()
    good = {"iss": ISSUER, "aud": "console", "exp": now + 60, "sub": "42"}

    def problems(**change):
        return policy.id_token_problems(
            {**good, **change}, issuer=ISSUER, client_id="console", now=now
        )

    assert problems() == []
    assert problems(aud=["console", "other"], azp="console") == []
    assert "issuer" in problems(iss="https://evil.example")[0]
    assert "aud" in problems(aud="other")[0]
    assert "azp" in problems(aud=["console", "other"])[0]
    assert "expired" in problems(exp=now - 1)[0]
    assert "expired" in problems(exp=None)[0]
    assert "subject" in problems(sub="")[0]


def test_the_claims_a_sign_in_reads():
    def read(**claims):
        return policy.read_claims(claims, username_claim="preferred_username", groups_claim="g")

    claims, why = read(sub="42", preferred_username="carol", email="c@x", g="solo")
    assert why == "" and claims.username == "carol" and claims.groups == ("solo",)
    claims, _ = read(sub="42", preferred_username="carol", g=["a", 3, "b"])
    assert claims.groups == ("a", "b")
    assert read(preferred_username="carol")[0] is None
    claims, why = read(sub="42", preferred_username="carol smith")
    assert claims is None and "'preferred_username' claim" in why


# -- what a sign-in writes -----------------------------------------------------------------


def _claims(username="carol", subject="sub-1", groups=(), **more) -> policy.Claims:
    return policy.Claims(subject=subject, username=username, groups=tuple(groups), **more)


def test_a_first_sign_in_makes_an_account_without_a_password(db):
    user, why = external_sign_in(ISSUER, _claims(email="carol@example.com", first_name="Carol"))
    assert why == "" and user.username == "carol" and not user.has_usable_password()
    assert (user.email, user.first_name) == ("carol@example.com", "Carol")
    again, _ = external_sign_in(ISSUER, _claims(username="carol.s", email="new@example.com"))
    assert again.pk == user.pk and again.email == "new@example.com"  # found by its subject
    assert ExternalIdentity.objects.get().last_sign_in_at is not None


def test_an_existing_account_of_the_username_is_linked_unless_staff(db, researcher, admin_user):
    user, why = external_sign_in(ISSUER, _claims(username="alice"))
    assert why == "" and user.pk == researcher.pk
    assert researcher.memberships.count() == 1  # its workspaces stay
    refused, why = external_sign_in(ISSUER, _claims(username="alice", subject="sub-2"))
    assert refused is None and "another account" in why
    refused, why = external_sign_in(ISSUER, _claims(username=admin_user.username, subject="s3"))
    assert refused is None and "staff account" in why
    assert ExternalIdentity.objects.count() == 1


def test_the_sync_is_audited_and_leaves_hand_made_memberships(
    db, researcher, workspace, other_workspace
):
    carol = get_user_model().objects.create_user("carol")
    actions.add_member(other_workspace, carol, Role.RESEARCHER)
    plan = actions.sync_provider_memberships(
        carol, {workspace.pk: Role.QUOTA_OWNER, other_workspace.pk: Role.ADMIN}, actor=carol
    )
    assert plan.add == {workspace.pk: Role.QUOTA_OWNER} and not plan.change
    mine = {m.workspace_id: (m.role, m.source) for m in carol.memberships.all()}
    assert mine == {
        workspace.pk: (Role.QUOTA_OWNER, MembershipSource.PROVIDER),
        other_workspace.pk: (Role.RESEARCHER, MembershipSource.MANUAL),
    }
    actions.sync_provider_memberships(carol, {workspace.pk: Role.RESEARCHER}, actor=carol)
    actions.sync_provider_memberships(carol, {}, actor=carol)
    assert list(carol.memberships.values_list("source", flat=True)) == ["manual"]
    entries = AuditEntry.objects.filter(action__startswith="workspace.member").order_by("pk")
    assert [(e.action, e.detail["changes"].get("source")) for e in entries] == [
        ("workspace.member_add", None),
        ("workspace.member_add", [None, "oidc"]),
        ("workspace.member_role", ["oidc", "oidc"]),
        ("workspace.member_remove", ["oidc", None]),
    ]
    assert Membership.objects.filter(user=researcher).count() == 1


def test_the_groups_are_read_against_the_workspaces_in_one_query(
    db, workspace, other_workspace, oidc_on, django_assert_num_queries
):
    with django_assert_num_queries(1):
        wanted = wanted_roles(("acme-vision", "acme-owners", "unrelated"))
    assert wanted == {workspace.pk: Role.QUOTA_OWNER, other_workspace.pk: Role.QUOTA_OWNER}
    with django_assert_num_queries(0):
        assert wanted_roles(("unrelated",)) == {}


def test_a_deactivated_account_is_signed_out(db, researcher, oidc_on):
    client = Client()
    client.force_login(researcher, backend="web.oidc.ProviderBackend")
    assert client.get(reverse("home")).status_code == 200
    researcher.is_active = False
    researcher.save()
    assert client.get(reverse("home")).status_code == 302
