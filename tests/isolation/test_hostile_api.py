"""Hostile bodies for POST /api/v1/jobs answer a stable JSON 400, never an HTML 500
(issue 9): deep nesting (RecursionError in the old code), lone surrogates (an encoding error
in the old code), constants that are not JSON, bodies that are not UTF-8. Nothing is written.
"""

import pytest
from django.urls import reverse

from jobs.models import Job, JobEvent

pytestmark = pytest.mark.django_db

VALID = '{"quota": "team-a", "image": "busybox", "command": "echo hi"'


def post(api, raw: bytes | str):
    return api.post(reverse("api:jobs"), raw, content_type="application/json")


def error(response) -> dict:
    assert response.status_code == 400, response.content[:300]
    assert response["Content-Type"] == "application/json"
    return response.json()["error"]


@pytest.mark.parametrize("depth", [100, 5_000, 200_000])
def test_deeply_nested_json_is_a_stable_400(api, quota, node, depth):
    for raw in (
        "[" * depth + "]" * depth,
        VALID + ', "env": ' + '{"a":' * depth + "1" + "}" * depth + "}",
    ):
        body = error(post(api, raw))
        assert body["code"] == "invalid_json"
        assert "nested deeper than 32 levels" in body["message"]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (VALID + ', "name": "\\ud800"}', "name"),
        (VALID + ', "env": {"A": "x\\udfff"}}', "env.A"),
        (VALID + ', "env": {"\\ud83d": "x"}}', "env"),
        ('"\\ud800"', None),
        (VALID + ', "command": "echo \\ud83d\\ude00 \\ud800"}', "command"),
    ],
)
def test_lone_surrogates_are_a_stable_400_with_the_field(api, quota, node, raw, field):
    body = error(post(api, raw))
    assert (body["code"], body["field"]) == ("invalid_text", field)
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_a_surrogate_pair_is_ordinary_text(api, quota, node):
    response = post(api, VALID + ', "name": "run \\ud83d\\ude00"}')
    assert response.status_code == 201, response.content
    assert Job.objects.get().name == "run \U0001f600"


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe not utf-8",
        VALID + ', "workers": NaN}',
        VALID + ', "workers": Infinity}',
        VALID + ', "workers": 1' + "0" * 5000 + "}",
        VALID,  # truncated
        "",
    ],
)
def test_other_broken_bodies_are_a_stable_400(api, quota, node, raw):
    response = post(api, raw)
    assert error(response)["code"] == "invalid_json"  # an empty body too: not a JSON object
    assert not Job.objects.exists()
