"""Creating jobs through the API: one, a batch, an array, and Idempotency-Key."""

import threading

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEntry
from jobs.models import Job, JobEvent
from tests.api.conftest import GOOD, error_of, post

pytestmark = pytest.mark.django_db


def test_create_returns_the_job(api, quota, node):
    response = post(api, "/api/v1/jobs", GOOD)
    assert response.status_code == 201
    data = response.json()
    assert data["status"] == "Pending" and data["pods"] == [] and data["events"]
    assert Job.objects.get().pk == data["id"]


def test_the_response_is_the_job_as_a_read_shows_it(api, quota, node):
    created = post(api, "/api/v1/jobs", GOOD).json()
    read = api.get(f"/api/v1/jobs/{created['id']}").json()
    # Built from the rows the request wrote, not read back: the same, except the estimate.
    assert created.pop("expected_start") == {
        "estimate": True,
        "at": None,
        "basis": "not estimated at submission",
    }
    read.pop("expected_start")
    assert created == read


def test_a_submission_reads_nothing_back(api, quota, node):
    post(api, "/api/v1/jobs", GOOD)  # token use noted once
    # token, rate counter (in the database unless REDIS_URL counts it in Redis); the form:
    # quota with its tenant's GPUs, its workspaces of mine, the pool's nodes (one grouped
    # query); then job, event, its run identity (docs/results.md), notification rules, audit
    # entry in a savepoint. Nothing is read back for the response.
    with CaptureQueriesContext(connection) as queries:
        response = post(api, "/api/v1/jobs", GOOD)
    assert response.status_code == 201
    sql = [q["sql"] for q in queries.captured_queries]
    assert not [q for q in sql if q.startswith('SELECT "jobs_')], sql
    statements = [q for q in sql if not q.startswith(("SAVEPOINT", "RELEASE", "BEGIN"))]
    counters = [q for q in statements if "accounts_ratecounter" in q]
    assert len(counters) == (0 if settings.REDIS_URL else 1), counters
    assert len(statements) - len(counters) == 9, "\n".join(s[:150] for s in statements)


def test_a_retried_create_with_the_same_key_returns_the_first_job(api, quota, node):
    first = post(api, "/api/v1/jobs", GOOD, **{"Idempotency-Key": "abc-1"})
    again = post(api, "/api/v1/jobs", GOOD, **{"Idempotency-Key": "abc-1"})
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1
    # Key order and whitespace do not make it another request.
    reordered = '{"command": "echo hi",  "image": "busybox", "quota": "team-a"}'
    assert (
        post(api, "/api/v1/jobs", reordered, **{"Idempotency-Key": "abc-1"}).json()["id"]
        == (first.json()["id"])
    )
    assert Job.objects.count() == 1


def test_the_same_key_with_another_body_is_refused(api, quota, node):
    post(api, "/api/v1/jobs", GOOD, **{"Idempotency-Key": "k"})
    response = post(api, "/api/v1/jobs", GOOD | {"name": "other"}, **{"Idempotency-Key": "k"})
    error = error_of(response, 422, "idempotency_key_reused")
    assert error["field"] == "Idempotency-Key"
    assert Job.objects.count() == 1


def test_keys_belong_to_their_user(api, colleague, quota, node):
    from tests.api.conftest import client_for

    mine = post(api, "/api/v1/jobs", GOOD, **{"Idempotency-Key": "shared"}).json()["id"]
    theirs = post(client_for(colleague), "/api/v1/jobs", GOOD, **{"Idempotency-Key": "shared"})
    assert theirs.status_code == 201 and theirs.json()["id"] != mine
    assert Job.objects.count() == 2


def test_a_refused_create_does_not_use_up_the_key(api, quota, node):
    bad = post(api, "/api/v1/jobs", GOOD | {"workers": 0}, **{"Idempotency-Key": "k2"})
    error_of(bad, 400, "validation_error")
    good = post(api, "/api/v1/jobs", GOOD | {"workers": 0}, **{"Idempotency-Key": "k2"})
    error_of(good, 400, "validation_error")  # still validated, not replayed
    assert post(api, "/api/v1/jobs", GOOD, **{"Idempotency-Key": "k3"}).status_code == 201


@pytest.mark.parametrize("key", ["", " ", "x" * 256, "with space", "tab\tkey", "é"])
def test_a_malformed_key_is_a_field_error(api, quota, node, key):
    response = api.post(
        "/api/v1/jobs",
        '{"quota": "team-a", "image": "b", "command": "c"}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
    )
    assert error_of(response, 400, "validation_error")["field"] == "Idempotency-Key"
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_make_one_job(researcher, quota, node, api_token):
    """Two requests with the same key at the same moment: the second waits on the first's
    key row and replays it."""
    barrier = threading.Barrier(4)
    results = []

    def send():
        client = Client(HTTP_AUTHORIZATION=f"Bearer {api_token}")
        barrier.wait()
        try:
            response = post(client, "/api/v1/jobs", GOOD, **{"Idempotency-Key": "race"})
            results.append((response.status_code, response.json()["id"]))
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 4
    assert {status for status, _ in results} == {201}
    assert len({job_id for _, job_id in results}) == 1
    assert Job.objects.count() == 1


# Batch and array -------------------------------------------------------------------------


def test_batch_creates_the_valid_jobs_and_reports_the_others(api, quota, node):
    body = {"jobs": [GOOD | {"name": "a"}, GOOD | {"workers": 0}, GOOD | {"name": "c"}]}
    response = post(api, "/api/v1/jobs/batch", body)
    assert response.status_code == 201, response.content
    data = response.json()
    assert [j["name"] for j in data["jobs"]] == ["a", "c"]
    (error,) = data["errors"]
    assert error["index"] == 1 and error["error"]["field"] == "workers"
    assert Job.objects.count() == 2
    assert JobEvent.objects.filter(reason="submitted").count() == 2


def test_a_batch_item_of_the_wrong_json_type_is_refused_alone(api, quota, node):
    """Types are checked item by item: a string for a number, an unknown field or an item
    that is not an object fails its own item, never the batch."""
    items = [
        GOOD | {"name": "a"},
        GOOD | {"workers": "2"},
        GOOD | {"nmae": "typo"},
        GOOD | {"env": {"A": 1}},
        GOOD | {"name": "e"},
    ]
    response = post(api, "/api/v1/jobs/batch", {"jobs": items})
    assert response.status_code == 201, response.content
    data = response.json()
    assert [j["name"] for j in data["jobs"]] == ["a", "e"]
    errors = {e["index"]: e["error"] for e in data["errors"]}
    assert sorted(errors) == [1, 2, 3]
    assert errors[1] == {
        "code": "validation_error",
        "message": "workers must be an integer.",
        "field": "workers",
        "fields": {"workers": ["workers must be an integer."]},
    }
    assert errors[2]["message"] == "Unknown field 'nmae'." and errors[2]["field"] == "nmae"
    assert errors[3]["field"] == "env"
    assert Job.objects.count() == 2
    response = post(api, "/api/v1/jobs/batch", {"jobs": [7, GOOD | {"name": "f"}]})
    assert response.status_code == 201, response.content
    (error,) = response.json()["errors"]
    assert error["index"] == 0 and error["error"]["message"] == "A job must be a JSON object."
    response = post(api, "/api/v1/jobs/batch", {"jobs": [GOOD | {"workers": "2"}, 7]})
    error = error_of(response, 400, "validation_error")
    assert error["field"] == "jobs.0" and "workers must be an integer." in error["message"]
    assert error["fields"] == {
        "jobs.0.workers": ["workers must be an integer."],
        "jobs.1": ["A job must be a JSON object."],
    }
    assert Job.objects.count() == 3


def _statements_of_batch(api, size: int) -> int:
    jobs = [GOOD | {"name": f"b{i}"} for i in range(size)]
    jobs[size // 2] = GOOD | {"workers": 0}  # one bad item, refused alone
    with CaptureQueriesContext(connection) as ctx:
        response = post(api, "/api/v1/jobs/batch", {"jobs": jobs})
    assert response.status_code == 201, response.content
    assert len(response.json()["jobs"]) == size - 1
    assert [e["index"] for e in response.json()["errors"]] == [size // 2]
    return len(ctx.captured_queries)


def test_a_batch_costs_the_same_statements_whatever_its_size(api, quota, node):
    post(api, "/api/v1/jobs", GOOD)  # token use noted once
    # The admission facts (quota, workspaces, nodes) are loaded once for the batch
    # (jobs.admission.facts.FactsLoader); the jobs and events are written in bulk.
    assert _statements_of_batch(api, 3) == _statements_of_batch(api, 30)


def test_a_batch_of_only_invalid_jobs_is_a_400(api, quota, node):
    response = post(api, "/api/v1/jobs/batch", {"jobs": [GOOD | {"workers": 0}]})
    error = error_of(response, 400, "validation_error")
    assert error["field"] == "jobs.0" and "jobs.0.workers" in error["fields"]
    assert Job.objects.count() == 0


def test_batch_type_errors_name_the_item_and_field(api, quota, node):
    # An item of the wrong JSON type is refused alone, by its index and field: the others
    # are created (every boundary is a batch of independent items).
    response = post(api, "/api/v1/jobs/batch", {"jobs": [GOOD, GOOD | {"workers": "2"}]})
    assert response.status_code == 201, response.content
    (error,) = response.json()["errors"]
    assert error["index"] == 1 and error["error"]["field"] == "workers"
    assert Job.objects.count() == 1
    # Every item refused: a 400 naming the first item, each item's field in `fields`.
    response = post(api, "/api/v1/jobs/batch", {"jobs": [GOOD | {"workers": "2"}] * 2})
    error = error_of(response, 400, "validation_error")
    assert error["field"] == "jobs.0" and {"jobs.0.workers", "jobs.1.workers"} <= set(
        error["fields"]
    )
    assert Job.objects.count() == 1


def test_array_creates_count_jobs_with_an_index(api, quota, node, researcher):
    body = {"count": 4, "job": GOOD | {"name": "sweep", "env": {"LR": "0.1"}}}
    response = post(api, "/api/v1/jobs/array", body)
    assert response.status_code == 201, response.content
    jobs = response.json()["jobs"]
    assert [j["name"] for j in jobs] == ["sweep-0", "sweep-1", "sweep-2", "sweep-3"]
    assert [j["env"] for j in jobs] == [
        {"LR": "0.1", "ARRAY_INDEX": str(i), "ARRAY_COUNT": "4"} for i in range(4)
    ]
    assert Job.objects.filter(owner=researcher).count() == 4
    # Each submission is audited, with the caller's address.
    entries = AuditEntry.objects.filter(action="job.submit")
    assert entries.count() == 4 and {e.via for e in entries} == {"api"}
    assert {e.source_address for e in entries} == {"127.0.0.1"}


def test_array_inserts_in_constant_queries(api, quota, node, django_assert_max_num_queries):
    post(api, "/api/v1/jobs/array", {"count": 2, "job": GOOD})  # token use noted once
    with django_assert_max_num_queries(40):
        response = post(api, "/api/v1/jobs/array", {"count": 300, "job": GOOD})
    assert response.status_code == 201 and len(response.json()["jobs"]) == 300


def test_array_is_validated_once_and_refused_whole(api, quota, node):
    response = post(api, "/api/v1/jobs/array", {"count": 3, "job": GOOD | {"gpus_per_worker": 9}})
    error = error_of(response, 400, "validation_error")
    assert error["field"] == "job.gpus_per_worker"
    assert Job.objects.count() == 0


@pytest.mark.parametrize("count", [0, -1, 1001])
def test_array_count_is_bounded(api, quota, node, count):
    response = post(api, "/api/v1/jobs/array", {"count": count, "job": GOOD})
    assert error_of(response, 400, "validation_error")["field"] == "count"


def test_array_with_the_same_key_returns_the_same_jobs(api, quota, node):
    body = {"count": 3, "job": GOOD}
    first = post(api, "/api/v1/jobs/array", body, **{"Idempotency-Key": "sweep-1"}).json()
    again = post(api, "/api/v1/jobs/array", body, **{"Idempotency-Key": "sweep-1"}).json()
    assert [j["id"] for j in again["jobs"]] == [j["id"] for j in first["jobs"]]
    assert Job.objects.count() == 3


def test_a_retried_restart_with_the_same_key_makes_one_clone(api, job, node):
    from tests.web.conftest import finish

    finish(job, node)
    first = post(api, f"/api/v1/jobs/{job.pk}/restart", **{"Idempotency-Key": "again-1"})
    again = post(api, f"/api/v1/jobs/{job.pk}/restart", **{"Idempotency-Key": "again-1"})
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"] and again["Idempotent-Replayed"] == "true"
    assert Job.objects.filter(cloned_from=job).count() == 1
