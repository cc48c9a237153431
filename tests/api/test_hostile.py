"""Hostile input gets a stable JSON 4xx, never a 500, and nothing is written."""

import json

import pytest

from jobs.models import Job
from tests.api.conftest import GOOD, error_of, post

pytestmark = pytest.mark.django_db


def nested(depth: int) -> str:
    head = '{"quota": "team-a", "image": "b", "command": "c", "env": '
    return head + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("depth", [40, 5_000, 200_000])
def test_deeply_nested_json_is_refused(api, quota, node, depth):
    error = error_of(post(api, "/api/v1/jobs", nested(depth)), 400, "invalid_json")
    assert "deep" in error["message"] or "nest" in error["message"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('{"quota": "team-a", "image": "b", "command": "\\ud800"}', "invalid_text"),
        # NUL is the form's to refuse (one validation path): a field error.
        ('{"quota": "team-a", "image": "b", "command": "a\\u0000b"}', "validation_error"),
        ('{"quota": "team-a", "image": "b", "command": "c", "env": {"\\udfff": "x"}}',
         "invalid_text"),
        ('{"quota": "team-a", "image": "b", "command": "c", "name": "\\u0000"}',
         "validation_error"),
        (b'{"quota": "team-a", "image": "\xff\xfe", "command": "c"}', "invalid_json"),
        ("", "invalid_json"),
        ("   ", "invalid_json"),
        ("null", "invalid_json"),
        ("[1, 2]", "invalid_json"),
        ("1e999999", "invalid_json"),
        ('{"quota": 1e999999, "image": "b", "command": "c"}', "validation_error"),
        ('{"quota": 123456789012345678901234567890, "image": "b", "command": "c"}',
         "validation_error"),
        ('{"a": 1, "a": 2}', "validation_error"),
    ],
)  # fmt: skip
def test_bad_text_and_bad_json_are_4xx(api, quota, node, body, code):
    error = error_of(post(api, "/api/v1/jobs", body), 400, code)
    assert error["message"]
    assert Job.objects.count() == 0


def test_the_offending_field_is_named(api, quota, node):
    body = '{"quota": "team-a", "image": "b", "command": "a\\u0000b"}'
    assert error_of(post(api, "/api/v1/jobs", body), 400, "validation_error")["field"] == "command"
    body = '{"quota": "team-a", "image": "b", "command": "a", "env": {"\\udfff": "x"}}'
    assert error_of(post(api, "/api/v1/jobs", body), 400, "invalid_text")["field"] == "env"


def test_a_huge_body_is_413(api, quota, node):
    body = json.dumps(GOOD | {"command": "x" * (3 * 1024 * 1024)})
    error_of(post(api, "/api/v1/jobs", body), 413, "too_large")
    assert Job.objects.count() == 0


def test_a_body_over_the_api_limit_is_413_before_parsing(api, quota, node):
    body = json.dumps({"jobs": [GOOD | {"command": "x" * 3000}] * 800})  # ~2.4 MB
    error_of(post(api, "/api/v1/jobs/batch", body), 413, "too_large")


@pytest.mark.parametrize(
    "query",
    ["quota=%00", "name=a%00b", "status=Running%00", "name=" + "x" * 3000,
     "limit=99999999999999999999999", "created_after=%00"],
)  # fmt: skip
def test_hostile_query_strings_are_4xx(api, job, query):
    response = api.get("/api/v1/jobs?" + query)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] in {"invalid_text", "validation_error"}


@pytest.mark.parametrize(
    "path", ["/api/v1/jobs?stauts=Running", "/api/v1/jobs?=null", "/api/v1/jobs/{id}/events?x=1"]
)
def test_a_misspelt_query_parameter_is_named_not_ignored(api, job, path):
    response = api.get(path.format(id=job.pk))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error" and "Unknown query parameter" in error["message"]


@pytest.mark.parametrize(
    "moment",
    ["9858-11-24T16:25:38%2B17:24", "0001-01-01T00:00:00%2B23:59", "9999-12-31T23:59:59-23:59"],
)
def test_extreme_offsets_are_answered_not_a_500(api, job, moment):
    """RFC 3339 allows offsets to ±23:59, PostgreSQL only to ±15:59: read in UTC."""
    response = api.get(f"/api/v1/jobs?created_after={moment}")
    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert response.json()["error"]["field"] == "created_after"


def test_invalid_utf8_in_a_query_is_replaced_not_a_500(api, job):
    response = api.get("/api/v1/jobs?owner=%ED%A0%80")  # an encoded lone surrogate
    assert response.status_code == 200 and response.json()["jobs"] == []


@pytest.mark.parametrize(
    "path",
    ["/api/v1/quotas/a%00b", "/api/v1/quotas/a%00b/queue", "/api/v1/nodes/%00",
     "/api/v1/jobs/99999999999999999999999/logs", "/api/v1/jobs/-1", "/api/v1/jobs/0/events",
     "/api/v1/quotas/" + "q" * 500],
)  # fmt: skip
def test_hostile_paths_are_404(api, job, path):
    error_of(api.get(path), 404, "not_found")


def test_a_nul_in_the_token_is_401_not_500(client, job):
    response = client.get("/api/v1/jobs", HTTP_AUTHORIZATION="Bearer gqc_\x00\x00\x00\x00aaaa_x")
    error_of(response, 401, "not_authenticated")


def test_unknown_methods_are_json_405(api, job):
    response = api.generic("PATCH", f"/api/v1/jobs/{job.pk}")
    error_of(response, 405, "method_not_allowed")
    assert "GET" in response["Allow"]


HOSTILE_VALUES = ["a\u0000b", "\ud800", "x" * 1_000_000, 12, ["out"], {"folder": "out"}]


@pytest.mark.parametrize(
    "value", HOSTILE_VALUES, ids=["nul", "surrogate", "1MB", "int", "list", "object"]
)
@pytest.mark.parametrize("field", ["result_output_dir", "result_inputs_sha256"])
def test_hostile_result_fields_are_refused_alone_in_a_batch(api, quota, node, field, value):
    """docs/results.md's declared output folder and content manifest: a hostile value is a
    stable 4xx naming its field (one job), or its item alone refused (a batch: the good
    item is created)."""
    body = json.dumps(GOOD | {field: value}, ensure_ascii=True)
    response = post(api, "/api/v1/jobs", body)
    assert response.status_code in (400, 413), response.content[:300]
    error = response.json()["error"]
    assert error["code"] in {"invalid_text", "validation_error", "too_large"}, error
    if error["code"] != "too_large":
        assert error["field"] == field, error
    assert Job.objects.count() == 0
    if isinstance(value, str) and len(value) > 1000:
        return  # a batch with 1 MB is refused whole by the body limit (the test above)
    batch = {"jobs": [GOOD | {"name": "good"}, GOOD | {"name": "bad", field: value}]}
    response = post(api, "/api/v1/jobs/batch", json.dumps(batch, ensure_ascii=True))
    if response.status_code == 400 and response.json()["error"]["code"] == "invalid_text":
        assert Job.objects.count() == 0  # undecodable text is refused before the items
        return
    assert response.status_code == 201, response.content[:300]
    body = response.json()
    assert [j["name"] for j in body["jobs"]] == ["good"]
    assert [e["index"] for e in body["errors"]] == [1]
    assert body["errors"][0]["error"]["field"] == field
