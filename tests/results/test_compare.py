"""Compare with run… (docs/results.md): what differs between two runs' identities, the same
list on the job page, in the API and the CLI; both runs must be visible to the caller.

Without the feature a restart's page cannot say what changed against its origin."""

import pytest
from django.urls import reverse

from cli.__main__ import main as cli_main
from jobs.models import Job
from policy.run_compare import Change, changes, flatten, resolved, shown
from tests.agents.conftest import heartbeat, register
from tests.api.conftest import client_for, error_of, post
from tests.results.test_console import SHA, report, unit

CONTRACT = {"unit": "partition", "expected_units": "p{1..2}", "expected_items": 20}


def test_flatten_and_changes():
    this = {"env": {"LR": "0.1", "SEED": "1"}, "workers": 2, "tags": ["a"], "ft_config": {}}
    other = {"env": {"LR": "0.2"}, "workers": 2.0, "tags": ["a", "b"], "ft_config": {"x": 1}}
    assert flatten(this)["env.LR"] == "0.1" and flatten(this)["ft_config"] == {}
    assert changes(this, other) == [
        Change("env.LR", "0.1", "0.2"),
        Change("env.SEED", this="1", other_set=False),
        Change("ft_config", this={}, other_set=False),
        Change("ft_config.x", other=1, this_set=False),
        Change("tags", ["a"], ["a", "b"]),
    ]  # 2 and 2.0 are one JSON number
    assert changes({"on": True}, {"on": 1}) == [Change("on", True, 1)]
    assert changes(this, this) == []


def test_resolved_is_the_first_attempts_rank_zero():
    facts = [
        {"attempt": 2, "rank": 0, "image_digest": "sha256:new", "code_version": "b"},
        {"attempt": 1, "rank": 1, "image_digest": "sha256:x", "code_version": "z"},
        {"attempt": 1, "rank": 0, "image_digest": "sha256:old", "code_version": ""},
    ]
    assert resolved(facts) == {"resolved.image_digest": "sha256:old"}
    assert resolved([]) == {}
    assert [shown("a"), shown(""), shown(3), shown(None), shown(1, False)] == [
        "a",
        '""',
        "3",
        "null",
        "—",
    ]


@pytest.fixture
def runs(client, ft_job, researcher):
    """An original that ran (code abc1234) and its restart from scratch with new inputs."""
    node, token = register(client)
    job, (pod,) = ft_job([node], result_contract={**CONTRACT, "inputs": "data-v1"})
    facts = {"executable": "/usr/bin/python3", "executable_sha256": SHA, "code_version": "abc1234"}
    units = [unit("p1"), unit("p2")]
    heartbeat(client, token, [report(pod, state="exited", units=units, facts=facts)])
    path = f"/api/v1/jobs/{job.pk}/restart"
    body = {"result_inputs": "data-v2", "from_scratch": True}
    response = post(client_for(researcher), path, body)
    assert response.status_code == 201, response.content[:300]
    return job, Job.objects.get(cloned_from=job)


def test_the_api_lists_what_changed(runs, researcher, outsider, django_assert_max_num_queries):
    original, clone = runs
    api = client_for(researcher)
    with django_assert_max_num_queries(12):
        response = api.get(f"/api/v1/jobs/{clone.pk}/compare", {"with": original.pk})
    assert response.status_code == 200, response.content[:300]
    found = response.json()
    assert (found["job"], found["with_job"], found["identical"]) == (clone.pk, original.pk, False)
    assert found["run_id"] == clone.run.run_id and found["with_run_id"] == original.run.run_id
    by_key = {c["key"]: c for c in found["changes"]}
    assert by_key["result_inputs"] | {"key": 0} == {
        "key": 0,
        "this": "data-v2",
        "other": "data-v1",
        "this_set": True,
        "other_set": True,
    }
    code = by_key["resolved.code_version"]  # the clone has not started: nothing resolved
    assert (code["this_set"], code["other"]) == (False, "abc1234")
    same = api.get(f"/api/v1/jobs/{original.pk}/compare", {"with": original.pk}).json()
    assert same["identical"] and same["changes"] == []
    # Both runs must be the caller's to see; the other run's number is required.
    path = f"/api/v1/jobs/{clone.pk}/compare"
    error_of(client_for(outsider).get(path, {"with": original.pk}), 404, "not_found")
    error_of(api.get(path), 400, "validation_error")
    error_of(api.get(path, {"with": "x"}), 400, "validation_error")
    error_of(api.get(path, {"with": 999999}), 404, "not_found")


def test_the_page_compares_a_restart_with_its_origin(runs, researcher, outsider, client):
    original, clone = runs
    client.force_login(researcher)
    detail = client.get(reverse("web:detail", args=[clone.pk])).text
    assert f"Compare with #{original.pk}" in detail
    page = client.get(reverse("web:compare", args=[clone.pk]))  # default: its origin
    assert page.status_code == 200
    assert 'data-identical="false"' in page.text
    assert "<code>result_inputs</code>" in page.text
    assert "<code>data-v2</code></td><td><code>data-v1</code>" in page.text
    url = reverse("web:compare", args=[original.pk])
    assert 'data-identical="true"' in client.get(url, {"with": original.pk}).text
    bad = client.get(url, {"with": "abc"})
    assert bad.status_code == 400 and "Give the number of a job" in bad.text
    assert client.get(url).status_code == 200  # no origin, no number: the form alone
    client.force_login(outsider)
    assert client.get(url, {"with": clone.pk}).status_code == 404


def test_a_run_the_user_cannot_see_is_not_compared(
    runs, researcher, outsider, client, other_workspace, other_quota
):
    original, _ = runs
    theirs = Job.objects.create(
        workspace=other_workspace, quota=other_quota, owner=outsider, name="x", image="i"
    )
    client.force_login(researcher)
    url = reverse("web:compare", args=[original.pk])
    assert client.get(url, {"with": theirs.pk}).status_code == 404
    api = client_for(researcher)
    path = f"/api/v1/jobs/{original.pk}/compare"
    error_of(api.get(path, {"with": theirs.pk}), 404, "not_found")


@pytest.mark.django_db(transaction=True)
def test_the_command_line_compares(runs, live_server, api_token, capsys):
    original, clone = runs
    argv = ["--url", live_server.url, "--token", api_token, "compare", str(clone.pk)]
    assert cli_main([*argv, str(original.pk)]) == 0
    out = capsys.readouterr().out
    assert f"{clone.run.run_id} vs {original.run.run_id}" in out
    rows = [line.split() for line in out.splitlines()]
    assert ["result_inputs", "data-v2", "data-v1"] in rows


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("\x00", "invalid_text"),
        ("\u00b2", "validation_error"),  # a digit to isdigit(), not to int()
        ("\uff11\uff12", "validation_error"),  # fullwidth digits
        ("9" * 30, "validation_error"),
        ("x" * 1_000_000, "validation_error"),
        ("-1", "validation_error"),
        ("0", "validation_error"),
    ],
)
def test_hostile_numbers_are_a_clear_error(runs, researcher, client, value, code):
    _, clone = runs
    client.force_login(researcher)
    page = client.get(reverse("web:compare", args=[clone.pk]), {"with": value})
    assert page.status_code == 400 and "Give the number of a job" in page.text
    api = client_for(researcher)
    error_of(api.get(f"/api/v1/jobs/{clone.pk}/compare", {"with": value}), 400, code)
