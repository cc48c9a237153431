"""GET /api/v1/usage: rows, CSV, stable errors, access, constant queries."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas.models import Quota, Role
from tests.api.conftest import client_for, error_of
from tests.conftest import make_user
from tests.usage.conftest import T0
from usage.actions.rollup import roll_up_usage
from usage.models import UsageBucket

pytestmark = pytest.mark.django_db
URL = "/api/v1/usage"
NOV = {"since": "2026-11-01", "until": "2026-12-01"}


@pytest.fixture
def rolled(history):
    roll_up_usage(now=history["until"])
    return history


def test_rows_by_quota_sum_to_the_pods_seconds(rolled, researcher):
    body = client_for(researcher).get(URL, NOV | {"group_by": "quota"}).json()
    assert body["granularity"] == "day" and body["since"] == "2026-11-01T00:00:00Z"
    (row,) = body["rows"]
    quota = Quota.objects.get(name="team-a")
    assert row["group"] == "team-a" and row["start"] == "2026-11-02T00:00:00Z"
    for field in ("in_quota", "borrowed", "idle_held", "waiting"):
        assert row[f"gpu_seconds_{field}"] == rolled["expect"][quota.pk, field] / 1e6
    assert row["gpu_seconds_lent"] == 0


def test_hourly_monthly_and_by_user(rolled, researcher):
    client = client_for(researcher)
    hourly = client.get(URL, NOV | {"granularity": "hour"}).json()["rows"]
    assert [r["start"][11:13] for r in hourly] == ["09", "10", "11", "12", "13", "14"]
    monthly = client.get(URL, NOV | {"granularity": "month"}).json()["rows"]
    assert [r["start"] for r in monthly] == ["2026-11-01T00:00:00Z"]
    users = client.get(URL, NOV | {"group_by": "user"}).json()["rows"]
    assert {r["group"] for r in users} == {"alice", "bob"}
    csv = client.get(URL, NOV | {"format": "csv"})
    assert csv["Content-Type"].startswith("text/csv")
    assert csv.content.decode().splitlines()[1].startswith("team-a,2026-11-02T00:00:00Z,")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"group_by": "planet"}, "group_by"),
        ({"granularity": "week"}, "granularity"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-02-30"}, "since"),
        ({"since": "2026-11-05", "until": "2026-11-01"}, "until"),
        ({"since": "2026-01-01", "until": "2026-03-01", "granularity": "hour"}, "since"),
        ({"since": "2020-01-01", "until": "2026-03-01"}, "since"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_parameters_get_the_stable_error(researcher, query, field):
    error = error_of(client_for(researcher).get(URL, query), 400, "validation_error")
    assert error["field"] == field


def test_who_sees_what(rolled, outsider, workspace):
    assert {r["group"] for r in client_for(outsider).get(URL, NOV).json()["rows"]} == {"team-b"}
    owner = make_user("olga", workspace, role=Role.QUOTA_OWNER)
    rows = client_for(owner).get(URL, NOV).json()["rows"]
    assert {r["group"] for r in rows} == {"team-a", "team-b"}
    lent = next(r for r in rows if r["group"] == "team-b")
    assert lent["gpu_seconds_lent"] > 0 and lent["gpu_seconds_in_quota"] == 0
    error_of(client_for(outsider).__class__().get(URL), 401, "not_authenticated")


def test_constant_queries(rolled, researcher, workspace, django_assert_num_queries):
    client = client_for(researcher)
    client.get(URL, NOV)
    with CaptureQueriesContext(connection) as few:
        client.get(URL, NOV | {"group_by": "user"})
    assert len(few) <= 7
    quota = Quota.objects.get(name="team-a")
    UsageBucket.objects.bulk_create(
        UsageBucket(
            span="d",
            start=T0 + timedelta(days=d),
            quota_id=quota.pk,
            workspace_id=w,
            user_id=u,
            in_quota_us=1,
        )
        for d in range(1, 20)
        for w, u in ((0, 0), (workspace.pk, 5000 + d))
    )
    with django_assert_num_queries(len(few)):
        assert len(client.get(URL, NOV | {"group_by": "user"}).json()["rows"]) > 20
