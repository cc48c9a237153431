"""Schemathesis against the OpenAPI document, over HTTP to a live test server.

Every operation gets generated requests (valid and invalid per the schema, with a valid
token); each response must not be a server error and must match the document: its status
code is one the operation declares, its content type and body conform. On PostgreSQL in
CI's second pass this runs against PostgreSQL. A few minutes at most: a bounded number of
examples per operation.
"""

import json

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from accounts.actions import issue_api_token
from jobs.models import Checkpoint
from policy.statuses import JobStatus
from tests.conftest import make_node
from tests.web.conftest import add_log, finish, place, submit

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
]
EXAMPLES = 30  # per operation: about 600 requests in all


@pytest.fixture
def seeded(settings, researcher, workspace, quota, other_quota, tenant):
    """Jobs in several states (with workers, logs, checkpoints) so that ids the generator
    tries exist, and settings that keep every request short."""
    settings.CONSOLE_LOOPS = "inprocess"  # no scheduler cycles on commit
    settings.API_RATE_LIMIT = "1000000/60"
    settings.API_AUTH_FAILURES_PER_ADDRESS = "1000000/60"
    settings.API_LOG_WAIT_MAX = 0  # follow=true answers at once
    node = make_node()
    running = submit(researcher, workspace, quota)
    (pod,) = place(running, node)
    add_log(pod, 0, ["hello", "\x1b[1mworld\x1b[0m"])
    Checkpoint.objects.create(job=running, attempt=1, step=5, path="/ck/5", committed=True)
    finish(submit(researcher, workspace, quota), node, JobStatus.FAILED)
    submit(researcher, workspace, quota)
    _, token = issue_api_token(researcher)
    return token


def _document() -> dict:
    from api.main import api

    return api.get_openapi_schema(path_prefix="/api/v1/")


# The document the server serves at /api/v1/openapi.json (checked equal below), loaded at
# collection so that every operation becomes its own test.
schema = schemathesis.openapi.from_dict(_document())


def test_the_served_document_is_the_one_tested(live_server, db):
    import requests

    served = requests.get(f"{live_server.url}/api/v1/openapi.json", timeout=30).json()
    assert served == json.loads(json.dumps(_document()))


@schema.parametrize()
@hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_conforms_to_its_openapi_document(case, live_server, seeded):
    case.call_and_validate(
        base_url=live_server.url,
        headers={"Authorization": f"Bearer {seeded}"},
        checks=CHECKS,
        timeout=30,
    )
