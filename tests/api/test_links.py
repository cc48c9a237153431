"""The create responses carry OpenAPI links (from a created job to its GET, logs, events,
stop, …, and to its quota), and every link resolves to a real operation: its operationId
is in the document, its parameters are that operation's path parameters, and followed from
a real response body it reaches the object the response named."""

import re

import pytest

from api.main import api as ninja_api
from tests.api.conftest import GOOD, post

pytestmark = pytest.mark.django_db

DOCUMENT = ninja_api.get_openapi_schema(path_prefix="/api/v1/")
OPERATIONS = {
    operation["operationId"]: (method, path, operation)
    for path, methods in DOCUMENT["paths"].items()
    for method, operation in methods.items()
}
EXPRESSION = re.compile(r"^\$response\.body#(/[a-z_0-9/]+)$")
JOB_OPERATIONS = {
    "job", "stop", "restart", "terminate", "logs", "events", "restarts", "checkpoints",
    "metrics", "why-pending", "expected-start",
}  # fmt: skip


def _links(operation_id: str, status: str) -> dict:
    _, _, operation = OPERATIONS[operation_id]
    return operation["responses"][int(status)]["links"]


def _pointer(body, pointer: str):
    for part in pointer.strip("/").split("/"):
        body = body[int(part)] if isinstance(body, list) else body[part]
    return body


def test_every_link_names_a_real_operation_and_its_path_parameters():
    links = [
        link
        for methods in DOCUMENT["paths"].values()
        for operation in methods.values()
        for response in operation["responses"].values()
        for link in response.get("links", {}).values()
    ]
    assert len(links) > 50
    for link in links:
        _, path, target = OPERATIONS[link["operationId"]]
        taken = {p["name"] for p in target["parameters"] if p["in"] == "path"}
        assert set(link["parameters"]) == taken == set(re.findall(r"{(\w+)}", path))
        for expression in link["parameters"].values():
            assert EXPRESSION.match(expression), expression


@pytest.mark.parametrize(
    ("operation_id", "status"),
    [("api_jobs_create_job", "201"), ("api_jobs_create_batch", "201"),
     ("api_jobs_create_array", "201"), ("api_jobs_restart_job", "201")],
)  # fmt: skip
def test_a_created_job_links_to_every_job_operation_and_its_quota(operation_id, status):
    links = _links(operation_id, status)
    assert JOB_OPERATIONS - {"restart"} <= set(links)
    assert {"quota", "quota-queue"} <= set(links)


BODIES = {
    "api_jobs_create_job": ("/api/v1/jobs", GOOD),
    "api_jobs_create_batch": ("/api/v1/jobs/batch", {"jobs": [GOOD, GOOD]}),
    "api_jobs_create_array": ("/api/v1/jobs/array", {"count": 2, "job": GOOD}),
}


@pytest.mark.parametrize("operation_id", BODIES)
def test_following_each_link_of_a_created_job_reaches_it(api, quota, node, operation_id):
    path, body = BODIES[operation_id]
    created = post(api, path, body)
    assert created.status_code == 201, created.content[:300]
    for name, link in _links(operation_id, "201").items():
        ((parameter, expression),) = link["parameters"].items()
        value = _pointer(created.json(), EXPRESSION.match(expression)[1])
        method, target_path, target = OPERATIONS[link["operationId"]]
        url = target_path.replace("{" + parameter + "}", str(value))
        response = api.generic(method.upper(), url)
        assert str(response.status_code) in {str(s) for s in target["responses"]}, name
        assert response.status_code != 404, (name, url, response.content[:200])
        if response.status_code == 200 and parameter == "job_id" and name != "restart":
            reached = response.json()
            assert reached.get("id", reached.get("job", value)) == value, name
