"""Request ids and JSON logs: each request has an id (the caller's when sane), echoed in the
response and carried by every log line written while handling it; one access line per
request; one JSON object per line whatever the message holds."""

import json
import logging

import pytest
from django.test import Client

from console.logjson import JsonFormatter
from console.requestid import (
    RequestIdFilter,
    accept_request_id,
    current_request_id,
    reset_request_id,
    set_request_id,
)


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(RequestIdFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def access_records():
    handler = Collect()
    logger = logging.getLogger("console.access")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


@pytest.mark.django_db
def test_a_request_gets_an_id_and_one_access_line(access_records):
    response = Client().get("/healthz")
    request_id = response["X-Request-ID"]
    assert len(request_id) == 32
    [record] = access_records
    assert record.request_id == request_id
    assert (record.http_method, record.path, record.status_code) == ("GET", "/healthz", 200)
    assert record.duration_ms >= 0
    assert current_request_id() is None  # reset after the request


@pytest.mark.django_db
def test_a_sane_caller_id_is_kept(access_records):
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="lb-7f3a:42")
    assert response["X-Request-ID"] == "lb-7f3a:42"
    assert access_records[0].request_id == "lb-7f3a:42"


@pytest.mark.parametrize(
    "hostile", ["has space", "line\nbreak", "x" * 129, "-leading-dash", "<script>", ""]
)
def test_a_hostile_caller_id_is_replaced(hostile):
    assert accept_request_id(hostile) is None


@pytest.mark.django_db
def test_errors_still_carry_the_id(access_records):
    response = Client().get("/no-such-page/", HTTP_X_REQUEST_ID="abc123")
    assert response.status_code == 404
    assert response["X-Request-ID"] == "abc123"
    assert access_records[0].status_code == 404


def _format(record: logging.LogRecord) -> dict:
    RequestIdFilter().filter(record)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    return json.loads(line)


def test_json_line_has_fields_extras_and_traceback():
    token = set_request_id("req-1")
    try:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            record = logging.LogRecord(
                "jobs.x", logging.ERROR, __file__, 1, "cycle %s\nfailed", (7,), sys.exc_info()
            )
        record.job_id = 7
        record.request = object()  # Django passes the request object: not logged
        entry = _format(record)
    finally:
        reset_request_id(token)
    assert entry["level"] == "ERROR"
    assert entry["logger"] == "jobs.x"
    assert entry["message"] == "cycle 7\nfailed"
    assert entry["request_id"] == "req-1"
    assert entry["job_id"] == 7
    assert "request" not in entry
    assert entry["exc_info"].splitlines()[-1] == "ValueError: boom"
    assert entry["time"].endswith("+00:00")


def test_outside_a_request_the_id_is_a_dash():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", (), None)
    assert _format(record)["request_id"] == "-"
