"""A quota owner of tenant A in the admin, walked through every registered ModelAdmin:
changelists (also as a related-object pop-up), add forms and their choices, the change,
delete and history pages of tenant B's objects (and a POST to change them), and every
autocomplete a foreign key offers. Nothing of B is listed, opened, changed or offered;
platform-wide models stay closed; what owners may do is the "Quota owners" group's."""

import pytest
from django.contrib import admin
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.contrib.auth.models import Group
from django.db import models
from django.forms.models import model_to_dict
from django.test import Client
from django.urls import NoReverseMatch, reverse

from accounts.actions import issue_api_token
from audit.models import AuditEntry
from quotas import actions
from quotas.models import Quota, ResourceType, Role
from tests.conftest import make_user
from tests.web.conftest import place, submit

SECRETS = ("globex-corp", "globex-h200", "globex-lab", "globex-gus", "globex-secret-job")


@pytest.fixture
def owner_client(workspace, quota) -> Client:
    owner = make_user("olga", workspace, role=Role.QUOTA_OWNER)
    actions.update_quota(quota, gpus=12, actor=owner)  # an audit entry of A
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def tenant_b(db, node) -> list[models.Model]:
    """Tenant B with something of every kind the admin shows, each named with a secret."""
    gus = make_user("globex-gus", email="gus@globex.example")
    tenant = actions.create_tenant("globex-corp", actor=gus)
    lab = actions.create_workspace(tenant, "globex-lab", actor=gus)
    quota = actions.create_quota(
        tenant=tenant,
        name="globex-h200",
        resource_type=ResourceType.LINGJUN,
        gpu_type="H200",
        gpus=4,
        actor=gus,
    )
    actions.bind_quotas(lab, [quota], actor=gus)
    membership = actions.add_member(lab, gus, Role.QUOTA_OWNER, actor=gus)
    job = submit(gus, lab, quota, name="globex-secret-job", workers=1, gpus_per_worker=1)
    place(job, node)
    token, _ = issue_api_token(gus)
    entries = list(AuditEntry.objects.filter(actor=gus))
    assert entries
    return [tenant, lab, quota, membership, job, gus, token, *entries]


def _url(model, view: str, *args) -> str | None:
    try:
        return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)
    except NoReverseMatch:
        return None


def _assert_hidden(response, where: str) -> None:
    text = response.content.decode(errors="replace")
    for secret in SECRETS:
        assert secret not in text, f"{where} shows {secret}"


def _choices_of(form) -> list[str]:
    """What the form offers to choose from (a raw id field offers no list: its pop-up is
    the changelist, walked apart; a hidden field offers nothing)."""
    shown = []
    for field in form.fields.values():
        queryset = getattr(field, "queryset", None)
        widget = getattr(field.widget, "widget", field.widget)
        if queryset is None or widget.is_hidden or isinstance(widget, ForeignKeyRawIdWidget):
            continue
        shown += [str(obj) for obj in queryset]
    return shown


def test_an_owner_of_a_sees_nothing_of_b_in_any_admin_page(owner_client, tenant_b, quota):
    opened = owner_client.get(_url(Quota, "change", quota.pk))
    assert opened.status_code == 200  # the walk is not vacuous: A's own quota opens
    for model in admin.site._registry:
        name = model._meta.label
        for query in ("", "?_popup=1&_to_field=id"):
            listing = owner_client.get(_url(model, "changelist") + query)
            assert listing.status_code in (200, 403), name
            _assert_hidden(listing, f"{name} list{query}")
        add = owner_client.get(_url(model, "add"))
        assert add.status_code in (200, 403), name
        if add.status_code == 200:
            _assert_hidden(add, f"{name} add")
            forms = [add.context["adminform"].form]
            forms += [
                f for formset in add.context["inline_admin_formsets"] for f in formset.formset
            ]
            for form in forms:
                assert not set(_choices_of(form)) & set(SECRETS), f"{name} add choices"
        for obj in (o for o in tenant_b if type(o) is model):
            before = model_to_dict(obj)
            for view in ("change", "delete", "history"):
                page = owner_client.get(_url(model, view, obj.pk))
                assert page.status_code in (302, 403, 404), (
                    f"{name} {view} of B: {page.status_code}"
                )
                _assert_hidden(page, f"{name} {view}")
            posted = owner_client.post(_url(model, "change", obj.pk), {"name": "taken"})
            assert posted.status_code in (302, 403, 404), name
            obj.refresh_from_db()
            assert model_to_dict(obj) == before, f"{name} of B changed"
        for field in model._meta.get_fields():
            if not (field.is_relation and field.concrete and field.related_model):
                continue
            picked = owner_client.get(
                "/admin/autocomplete/",
                {
                    "app_label": model._meta.app_label,
                    "model_name": model._meta.model_name,
                    "field_name": field.name,
                    "term": "globex",
                },
            )
            assert picked.status_code in (200, 403, 404), f"{name}.{field.name}"
            _assert_hidden(picked, f"autocomplete {name}.{field.name}")


def test_platform_wide_models_stay_closed(owner_client, tenant_b):
    index = owner_client.get(reverse("admin:index")).text
    for hidden in ("Tenants", "Api tokens", "Bootstrap tokens", "Users", "Groups"):
        assert f">{hidden}</a>" not in index
    for shown in ("Quotas", "Workspaces", "Jobs", "Nodes", "Audit entries"):
        assert f">{shown}</a>" in index
    for label in ("auth.User", "auth.Group", "accounts.ApiToken", "quotas.Tenant"):
        model = next(m for m in admin.site._registry if m._meta.label == label)
        assert owner_client.get(_url(model, "changelist")).status_code == 403, label


def test_the_audit_list_shows_the_owners_tenant_only(owner_client, tenant_b):
    listing = owner_client.get(reverse("admin:audit_auditentry_changelist"))
    assert listing.status_code == 200 and "team-a" in listing.text
    _assert_hidden(listing, "audit")
    export = owner_client.get(reverse("admin:audit_auditentry_export"))
    text = b"".join(export.streaming_content).decode()
    assert "team-a" in text and not any(secret in text for secret in SECRETS)


def test_the_quota_owners_group_grants_what_owners_may_do(owner_client, quota):
    assert owner_client.get(_url(Quota, "add")).status_code == 200
    group = Group.objects.get(name="Quota owners")
    assert group.permissions.filter(codename="add_quota").exists()
    group.permissions.remove(*group.permissions.filter(codename__in=["add_quota", "view_job"]))
    assert owner_client.get(_url(Quota, "add")).status_code == 403
    assert owner_client.get(reverse("admin:jobs_job_changelist")).status_code == 403
    assert owner_client.get(_url(Quota, "change", quota.pk)).status_code == 200


def test_an_owner_cannot_demote_the_last_owner_in_the_admin(owner_client, workspace, quota):
    (owner,) = workspace.memberships.filter(role=Role.QUOTA_OWNER)
    form = {
        "tenant": workspace.tenant_id,
        "name": workspace.name,
        "quotas": [quota.pk],
        "memberships-TOTAL_FORMS": 1,
        "memberships-INITIAL_FORMS": 1,
        "memberships-0-id": owner.pk,
        "memberships-0-workspace": workspace.pk,
        "memberships-0-user": owner.user_id,
        "memberships-0-role": Role.RESEARCHER,
    }
    url = reverse("admin:quotas_workspace_change", args=[workspace.pk])
    refused = owner_client.post(url, form)
    assert refused.status_code == 200 and "is the last quota owner of acme" in refused.text
    owner.refresh_from_db()
    assert owner.role == Role.QUOTA_OWNER
    removed = owner_client.post(url, form | {"memberships-0-DELETE": "on"})
    assert removed.status_code == 200 and "is the last quota owner of acme" in removed.text
    assert workspace.memberships.filter(pk=owner.pk).exists()
