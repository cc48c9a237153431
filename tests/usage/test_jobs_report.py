"""Usage per job (page, API, CLI) and every grouping's queries constant in the history's
size: a page of jobs, most used first, from the per-job buckets."""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.actions import issue_api_token
from cli.__main__ import main
from quotas.models import Quota, Role
from tests.api.conftest import client_for, error_of
from tests.conftest import make_user
from tests.usage.conftest import T0
from tests.usage.test_cli import no_cycles  # noqa: F401
from tests.usage.test_page import WEEK, client_of, groups
from usage.actions.rollup import roll_up_usage
from usage.models import JobUsageBucket, UsageBucket

URL = "/api/v1/usage"
NOV = {"since": "2026-11-01", "until": "2026-12-01"}


@pytest.fixture
def rolled(history):
    roll_up_usage(now=history["until"])
    return history


@pytest.mark.django_db
def test_rows_per_job_most_used_first_and_paged(rolled, researcher):
    trainer, borrower, waiter = rolled["jobs"]
    client = client_for(researcher)
    body = client.get(URL, NOV | {"group_by": "job"}).json()
    names = [r["group"] for r in body["rows"]]
    assert names == [
        f"borrower (#{borrower.pk})",  # 3 GPUs for 4 h 20 min
        f"trainer (#{trainer.pk})",  # 4 GPUs for 2 h 25 min
        f"waiter (#{waiter.pk})",
    ]
    assert body["next_offset"] is None
    borrowed = next(r for r in body["rows"] if r["group"].startswith("borrower"))
    assert borrowed["gpu_seconds_borrowed"] == 3 * 90 * 60 and borrowed["gpu_seconds_lent"] == 0
    waited = next(r for r in body["rows"] if r["group"].startswith("waiter"))
    assert waited["gpu_seconds_waiting"] == 4 * 3 * 3600
    first = client.get(URL, NOV | {"group_by": "job", "limit": 1}).json()
    assert [r["group"] for r in first["rows"]] == names[:1] and first["next_offset"] == 1
    second = client.get(URL, NOV | {"group_by": "job", "limit": 1, "offset": 1}).json()
    assert [r["group"] for r in second["rows"]] == names[1:2] and second["next_offset"] == 2
    hourly = client.get(URL, NOV | {"group_by": "job", "granularity": "hour", "limit": 1}).json()
    assert {r["start"][11:13] for r in hourly["rows"]} == {"10", "11", "12", "13", "14"}
    csv = client.get(URL, NOV | {"group_by": "job", "format": "csv"}).content.decode()
    assert [line.split(",")[0] for line in csv.splitlines()[1:]] == names
    error = error_of(
        client.get(URL, NOV | {"group_by": "job", "limit": 0}), 400, "validation_error"
    )
    assert error["field"] == "limit"


@pytest.mark.django_db
def test_jobs_are_seen_by_their_workspaces_and_tenant_owners_only(rolled, outsider, workspace):
    assert client_for(outsider).get(URL, NOV | {"group_by": "job"}).json()["rows"] == []
    owner = make_user("olga", workspace, role=Role.QUOTA_OWNER)
    assert len(client_for(owner).get(URL, NOV | {"group_by": "job"}).json()["rows"]) == 3
    assert groups(client_of(outsider).get("/usage/", WEEK | {"group": "job"})) == set()


@pytest.mark.django_db
def test_page_per_job_with_pages(rolled, researcher, settings, monkeypatch):
    from protocol import limits

    monkeypatch.setattr(limits, "USAGE_JOB_ROWS", 2)
    client = client_of(researcher)
    page = client.get("/usage/", WEEK | {"group": "job"})
    assert page.status_code == 200
    assert {g.split(" (")[0] for g in groups(page)} == {"trainer", "borrower"}
    assert 'data-k="next"' in page.content.decode()
    last = client.get("/usage/", WEEK | {"group": "job", "page": 2})
    assert {g.split(" (")[0] for g in groups(last)} == {"waiter"}
    assert 'rel="prev"' in last.content.decode() and 'data-k="next"' not in last.content.decode()


def _more_history(quota, workspace, n: int) -> None:
    """Many more buckets of every kind (other days, people, jobs) than the first read saw."""
    UsageBucket.objects.bulk_create(
        UsageBucket(
            span=span,
            start=T0 + timedelta(days=d),
            quota_id=quota.pk,
            workspace_id=w,
            user_id=w,
            in_quota_us=1,
        )
        for span in ("d", "m")
        for d in range(1, n)
        for w in (0, 1000 + d)
    )
    JobUsageBucket.objects.bulk_create(
        JobUsageBucket(
            span=span,
            start=T0 + timedelta(days=d, hours=h),
            job_id=5000 + d,
            quota_id=quota.pk,
            workspace_id=workspace.pk,
            user_id=1,
            in_quota_us=9,
        )
        for span in ("h", "d")
        for d in range(1, n)
        for h in range(3)
    )


@pytest.mark.django_db
@pytest.mark.parametrize("group", ["quota", "workspace", "user", "gpu_type", "job"])
def test_every_grouping_reads_in_constant_queries(
    rolled, researcher, workspace, group, django_assert_num_queries
):
    api, page = client_for(researcher), client_of(researcher)
    api.get(URL, NOV)
    page.get("/usage/", WEEK)
    with CaptureQueriesContext(connection) as api_first:
        api.get(URL, NOV | {"group_by": group})
    with CaptureQueriesContext(connection) as page_first:
        page.get("/usage/", WEEK | {"group": group, "period": "month"})
    _more_history(Quota.objects.get(name="team-a"), workspace, 25)
    with django_assert_num_queries(len(api_first)):
        api.get(URL, NOV | {"group_by": group})
    with django_assert_num_queries(len(page_first)):
        page.get("/usage/", WEEK | {"group": group, "period": "month"})


@pytest.fixture
def cli_env(
    no_cycles,  # noqa: F811
    live_server,
    history,
    researcher,
    monkeypatch,
    tmp_path,
):
    roll_up_usage(now=history["until"])
    _, token = issue_api_token(researcher)
    monkeypatch.setenv("GPU_CONSOLE_URL", live_server.url)
    monkeypatch.setenv("GPU_CONSOLE_TOKEN", token)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    return history


@pytest.mark.django_db(transaction=True)
def test_cli_by_job_pages(cli_env, capsys):
    args = ["usage", "--by", "job", "--since", "2026-11-01", "--until", "2026-12-01"]
    assert main([*args, "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "trainer" in out and "waiter" not in out and "--offset 2" in out
    assert main([*args, "--offset", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["group"].split(" (")[0] for r in rows] == ["waiter"]
