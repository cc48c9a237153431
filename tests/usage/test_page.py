"""The Usage page: who sees what, the period picker, CSV, the HTMX partial, constant
queries."""

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from quotas.models import Quota, Role, Tenant, Workspace
from tests.conftest import make_user
from tests.usage.conftest import T0
from tests.web.conftest import HTMX
from usage.actions.rollup import roll_up_usage
from usage.models import UsageBucket

pytestmark = pytest.mark.django_db
WEEK = {"period": "week", "date": "2026-11-02", "group": "quota"}


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def rolled(history):
    roll_up_usage(now=history["until"])
    return history


def groups(response) -> set[str]:
    html = response.content.decode()
    return {part.split('"')[0] for part in html.split('data-group="')[1:]}


def test_member_sees_their_workspaces_quotas_only(rolled, researcher):
    response = client_of(researcher).get("/usage/", WEEK)
    assert response.status_code == 200
    assert groups(response) == {"team-a"}
    by_user = client_of(researcher).get("/usage/", WEEK | {"group": "user"})
    assert groups(by_user) == {"alice", "bob"}  # colleagues in the same workspace


def test_outsider_sees_only_their_own_quota(rolled, outsider):
    response = client_of(outsider).get("/usage/", WEEK)
    assert groups(response) == {"team-b"}  # what it lent
    assert groups(client_of(outsider).get("/usage/", WEEK | {"group": "user"})) == set()


def test_quota_owner_sees_their_tenant_and_superuser_everything(rolled, workspace):
    owner = make_user("olga", workspace, role=Role.QUOTA_OWNER)
    assert groups(client_of(owner).get("/usage/", WEEK)) == {"team-a", "team-b"}
    elsewhere = Tenant.objects.create(name="globex")
    their = Workspace.objects.create(tenant=elsewhere, name="x")
    stranger = make_user("sam", their, role=Role.QUOTA_OWNER)
    assert groups(client_of(stranger).get("/usage/", WEEK)) == set()
    root = make_user("root", is_superuser=True, is_staff=True)
    assert groups(client_of(root).get("/usage/", WEEK | {"group": "gpu_type"})) == {"H200"}


def test_anonymous_is_sent_to_login(client):
    response = client.get("/usage/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_wrong_method_is_refused(rolled, researcher):
    assert client_of(researcher).post("/usage/").status_code == 405


def test_csv_has_the_rows_of_the_period(rolled, researcher):
    response = client_of(researcher).get("/usage/", WEEK | {"format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    lines = response.content.decode().splitlines()
    assert lines[0].startswith("group,start,gpu_seconds_in_quota")
    assert all(line.startswith("team-a,") for line in lines[1:])
    total = sum(float(line.split(",")[2]) for line in lines[1:])
    assert total == rolled["expect"][Quota.objects.get(name="team-a").pk, "in_quota"] / 1e6


def test_htmx_gets_the_report_alone_and_bad_dates_get_field_errors(rolled, researcher):
    client = client_of(researcher)
    partial = client.get("/usage/", WEEK, **HTMX).content.decode()
    assert partial.lstrip().startswith('<div id="usage-report">') and "<nav" not in partial
    bad = client.get("/usage/", {"period": "custom", "since": "2026-11-05", "until": "2026-11-01"})
    assert bad.status_code == 400
    assert 'aria-invalid="true"' in bad.content.decode()
    assert client.get("/usage/", {"date": "not-a-date"}).status_code == 400


def test_charts_json_and_every_period(rolled, researcher, node):
    client = client_of(researcher)
    charts = client.get("/usage/charts/", WEEK).json()
    assert len(charts["guarantee"]["t"]) == 7 * 24
    held = charts["cluster"]["series"][0]["values"]  # None after the history's horizon
    assert max(v for v in held if v is not None) > 0
    for period in ("day", "month"):
        assert client.get("/usage/", WEEK | {"period": period}).status_code == 200


def test_queries_do_not_grow_with_the_history(rolled, researcher, django_assert_num_queries):
    client = client_of(researcher)
    client.get("/usage/", WEEK)  # warm the session
    with CaptureQueriesContext(connection) as first:
        client.get("/usage/", WEEK)
    # With the tree: one read of the quotas' parents for the roll-up; and the nodes' banner
    # (console.context_processors.node_banner).
    assert len(first) <= 12
    quota = Quota.objects.get(name="team-a")
    UsageBucket.objects.bulk_create(
        UsageBucket(
            span=span,
            start=T0 + timedelta(hours=h),
            quota_id=quota.pk,
            workspace_id=w,
            user_id=w,
            in_quota_us=1,
        )
        for span in ("h", "d")
        for h in range(24, 100)
        for w in (0, 1000 + h)
    )
    with django_assert_num_queries(len(first)):
        client.get("/usage/", WEEK)
    with time_machine.travel(T0, tick=False):
        assert client.get("/usage/").status_code == 200  # the default: the week to today
