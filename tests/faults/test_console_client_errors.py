"""Answers that are rightly 4xx log no traceback; the API refuses "" where its document
lists values; a job's env may not claim the variables the agent sets for its workers."""

import io
import logging
import sys
from urllib.parse import urlencode

import pytest
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseForbidden
from django.test import RequestFactory
from django.utils.log import log_response

from jobs.models import Job
from protocol.workerenv import WORKER_ENV
from tests.api.conftest import GOOD, client_for, error_of, post

pytestmark = pytest.mark.django_db


@pytest.fixture
def console_api(researcher):
    return client_for(researcher)


@pytest.fixture
def console_log():
    """What the console's configured log handlers write (settings.LOGGING, as deployed)."""
    handlers = [h for h in logging.getLogger().handlers if h.get_name() == "console"]
    assert handlers, "the root logger has no 'console' handler"
    stream = io.StringIO()
    old = handlers[0].setStream(stream)
    yield stream
    handlers[0].setStream(old)


def test_too_many_fields_is_a_400_without_a_traceback(client, settings, console_log):
    body = urlencode({f"f{i}": "x" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 5)})
    response = client.post("/login/", body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    text = console_log.getvalue()
    assert "TooManyFieldsSent" in text or "number of GET/POST parameters" in text, text
    assert "Traceback" not in text and "ERROR" not in text


def test_a_too_large_body_is_a_400_without_a_traceback(client, settings, console_log):
    body = "a=" + "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)
    response = client.post("/login/", body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    text = console_log.getvalue()
    assert "exceeded" in text.lower() and "Traceback" not in text, text


def test_permission_denied_is_logged_without_a_traceback(console_log):
    """What Django's handler logs for a view that raised PermissionDenied."""
    request = RequestFactory().get("/jobs/1/")
    try:
        raise PermissionDenied("not yours")
    except PermissionDenied:
        log_response(
            "Forbidden (Permission denied): %s",
            request.path,
            response=HttpResponseForbidden(),
            request=request,
            exception=sys.exc_info()[1],
        )
    text = console_log.getvalue()
    assert "Forbidden (Permission denied): /jobs/1/" in text
    assert "Traceback" not in text


def test_a_server_error_keeps_its_traceback(console_log):
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("django.request").error(
            "Internal Server Error: /x", exc_info=True, extra={"status_code": 500}
        )
    assert "Traceback" in console_log.getvalue()


@pytest.mark.parametrize("field", ["idle_resources", "run_type", "restart_policy", "hang_action"])
def test_an_empty_choice_is_refused_by_the_api(console_api, quota, node, field):
    response = post(console_api, "/api/v1/jobs", {**GOOD, "fault_tolerance": True, field: ""})
    error = error_of(response, 400, "validation_error")
    assert error["field"] == field and "Choose one of" in error["message"]
    assert not Job.objects.exists()


def test_an_empty_choice_in_a_batch_is_refused_alone(console_api, quota, node):
    response = post(console_api, "/api/v1/jobs/batch", {"jobs": [GOOD, {**GOOD, "run_type": ""}]})
    assert response.status_code in (200, 201, 207), response.content[:300]
    assert Job.objects.count() == 1


@pytest.mark.parametrize("name", sorted(WORKER_ENV))
def test_a_variable_the_agent_sets_is_refused_in_env(console_api, quota, node, name):
    response = post(console_api, "/api/v1/jobs", {**GOOD, "env": {name: "7"}})
    error = error_of(response, 400, "validation_error")
    assert error["field"] == "env" and name in error["message"]
    assert not Job.objects.exists()


def test_the_list_matches_what_the_agent_injects():
    from agents.node.runtimes.base import (
        ACCEPTED_ENV,
        CHECKPOINT_ENV,
        OUTPUT_ENV,
        PROGRESS_ENV,
        LaunchSpec,
        injected_env,
    )
    from protocol.devices import is_device_env

    spec = LaunchSpec(pod_id=1, job_id=1, attempt=1, rank=0, world_size=1, image="i", command="c")
    names = {k for k in injected_env(spec) if not is_device_env(k)} - {"PYTHONUNBUFFERED"}
    assert names | {CHECKPOINT_ENV, PROGRESS_ENV, OUTPUT_ENV, ACCEPTED_ENV} == WORKER_ENV
