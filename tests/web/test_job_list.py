"""The job list: filters, search, sort, pagination, Real-time Resources, restarts, expected
start, long names; and `jobs.filters`, the parser the API can use too."""

from datetime import date, timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from jobs.filters import JobFilters, parse_job_filters
from jobs.models import Job
from jobs.paging import BadPageRequest
from tests.conftest import make_node
from tests.web.conftest import Tree, borrow, place, submit


def names(client, query: str = "") -> list[str]:
    response = client.get(reverse("web:list") + query)
    assert response.status_code == 200, response.text[:500]
    return [job.name for job in response.context["jobs"]]


@pytest.fixture
def jobs(researcher, colleague, workspace, quota, other_quota, node):
    """alpha (alice, running in quota), beta (bob, Pending, Acceptable), gamma (alice,
    borrowing other_quota's GPUs, Only Idle Resources), delta (alice, finished)."""
    other_workspace_quota = other_quota
    workspace.quotas.add(other_workspace_quota)
    alpha = submit(researcher, workspace, quota, name="alpha", command="python train.py --lr 3")
    place(alpha, node)
    beta = submit(
        colleague,
        workspace,
        quota,
        name="beta",
        command="torchrun eval.py",
        idle_resources="Acceptable",
        priority=5,
        gpus_per_worker=4,
    )
    gamma = submit(
        researcher,
        workspace,
        quota,
        name="gamma",
        command="python sweep.py",
        idle_resources="Only Idle Resources",
        gpus_per_worker=2,
    )
    borrow(gamma, make_node("node-1"), other_workspace_quota, [0, 1])
    delta = submit(researcher, workspace, other_workspace_quota, name="delta", command="echo")
    Job.objects.filter(pk=delta.pk).update(status="Completed")
    return {"alpha": alpha, "beta": beta, "gamma": gamma, "delta": delta}


def test_filters_each_narrow_the_list(member_client, jobs):
    assert names(member_client) == ["delta", "gamma", "beta", "alpha"]
    assert names(member_client, "?status=Running") == ["gamma", "alpha"]
    assert names(member_client, "?status=Pending,Completed") == ["delta", "beta"]
    assert names(member_client, "?quota=team-b") == ["delta"]
    assert names(member_client, "?owner=bob") == ["beta"]
    assert names(member_client, "?owner=me") == ["delta", "gamma", "alpha"]
    assert names(member_client, "?idle=Acceptable") == ["beta"]
    assert names(member_client, "?placement=in_quota") == ["alpha"]
    assert names(member_client, "?placement=not_in_quota") == ["gamma"]
    assert names(member_client, "?q=TRAIN") == ["alpha"]  # the command, any case
    assert names(member_client, "?q=eval") == ["beta"]
    assert names(member_client, "?q=gam") == ["gamma"]  # the name
    assert names(member_client, "?owner=me&status=Running&q=sweep") == ["gamma"]


def test_time_range(member_client, researcher, workspace, quota, node):
    with time_machine.travel(timezone.now() - timedelta(days=10), tick=False):
        submit(researcher, workspace, quota, name="old")
    submit(researcher, workspace, quota, name="new")
    assert names(member_client, "?since=24h") == ["new"]
    assert names(member_client, "?since=30d") == ["new", "old"]
    day = (timezone.now() - timedelta(days=10)).date().isoformat()
    assert names(member_client, f"?from={day}&to={day}") == ["old"]
    assert names(member_client, f"?from={date.today().isoformat()}") == ["new"]


def test_sorts(member_client, researcher, workspace, quota, node):
    for i in range(7):
        submit(
            researcher, workspace, quota, name=f"job-{i}", priority=1 + i % 3, gpus_per_worker=i % 4
        )
    by = {
        "created": [f"job-{i}" for i in range(7)],
        "name": [f"job-{i}" for i in range(7)],
        "-priority": ["job-5", "job-2", "job-4", "job-1", "job-6", "job-3", "job-0"],
        "-gpus": ["job-3", "job-6", "job-2", "job-5", "job-1", "job-4", "job-0"],
    }
    for sort, expected in by.items():
        assert names(member_client, f"?sort={sort}") == expected, sort


def test_keyset_pagination_with_a_sort(member_client, researcher, workspace, quota, node):
    for i in range(55):
        submit(researcher, workspace, quota, name=f"n{i:02d}", priority=1 + i % 2)
    first = member_client.get(reverse("web:list") + "?sort=-priority")
    page1 = [j.name for j in first.context["jobs"]]
    cursor = first.context["next_cursor"]
    second = member_client.get(reverse("web:list") + f"?sort=-priority&cursor={cursor}")
    page2 = [j.name for j in second.context["jobs"]]
    assert len(page1) == 50 and len(page2) == 5 and not set(page1) & set(page2)
    html = first.text
    assert "sort=-priority&amp;cursor=" in html  # the pager keeps the filters


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?status=Sleeping", "status"),
        ("?idle=Sometimes", "idle"),
        ("?placement=somewhere", "placement"),
        ("?since=1y", "since"),
        ("?from=yesterday", "from"),
        ("?from=2025-02-02&to=2025-01-01", "to"),
        ("?sort=owner", "sort"),
        ("?q=" + "x" * 201, "q"),
    ],
)
def test_bad_filters_are_a_clear_error(member_client, jobs, query, field):
    response = member_client.get(reverse("web:list") + query)
    assert response.status_code == 400
    assert field in response.context["error"] or field == "status"
    with pytest.raises(BadPageRequest) as exc:
        parse_job_filters(dict(part.split("=", 1) for part in query[1:].split("&")))
    assert exc.value.field == field


def test_the_parser_round_trips_for_links_and_the_api():
    params = {
        "status": "running",
        "quota": "team-a",
        "owner": "me",
        "q": " lr ",
        "sort": "name",
        "from": "2025-01-01",
        "placement": "not_in_quota",
        "idle": "Acceptable",
    }
    filters = parse_job_filters(params)
    assert filters.statuses == ("Running",) and filters.search == "lr"
    assert parse_job_filters(filters.params()) == filters
    assert JobFilters().params() == {} and not JobFilters().active


def test_columns_real_time_resources_restarts_gpus(
    member_client, jobs, researcher, workspace, quota
):
    ft = submit(
        researcher, workspace, quota, name="ft", fault_tolerance=True, ft_config={"max_restarts": 5}
    )
    Job.objects.filter(pk=ft.pk).update(restart_count=2)
    html = member_client.get(reverse("web:list")).text
    tree = Tree(html)
    rows = {
        e.text.strip(): e
        for e in tree.elements
        if e.tag == "a" and "truncate" in (e.attrs.get("class") or "")
    }
    assert set(rows) >= {"alpha", "beta", "gamma", "delta", "ft"}
    assert "1 In Quota" in html and "2 Not in Quota" in html
    assert "2/5" in html  # restarts used / max
    assert ">4<" in html  # beta's GPUs


def test_waiting_jobs_show_an_expected_start(member_client, jobs):
    html = member_client.get(reverse("web:list")).text
    # beta (4 GPUs, Pending) fits now: the scheduler would start it at its next cycle.
    assert "est.)" in html and "next scheduling cycle" in html


def test_long_unbroken_names_are_truncated_not_widening(
    member_client, researcher, workspace, quota, node
):
    long_name = "x" * 200
    submit(researcher, workspace, quota, name=long_name)
    tree = Tree(member_client.get(reverse("web:list")).text)
    (link,) = [e for e in tree.elements if e.attrs.get("title") == long_name]
    assert "truncate" in link.attrs["class"] and link.parent.attrs["class"] == "col-name"


def test_polls_keep_the_filters(member_client, jobs):
    html = member_client.get(reverse("web:list") + "?owner=me&sort=name").text
    rows = Tree(html).by_id("job-rows")
    assert rows.attrs["hx-get"] == "/jobs/?owner=me&sort=name"
