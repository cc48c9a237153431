"""Which requests the console runs a second time after losing its database connection
(console.dbretry.safe_to_repeat; docs/fault-tolerance.md, "A lost database connection")."""

import pytest

from console.dbretry import safe_to_repeat

KEY = {"Idempotency-Key": "k-1"}
CASES = [
    ("GET", "/jobs/", {}, True),
    ("HEAD", "/", {}, True),
    ("OPTIONS", "/api/v1/jobs", {}, True),
    ("PUT", "/api/v1/x", {}, True),
    ("DELETE", "/api/v1/x", {}, True),
    ("POST", "/api/v1/jobs", KEY, True),
    ("POST", "/api/v1/jobs/batch", KEY, True),
    ("POST", "/api/v1/jobs/array", KEY, True),
    ("POST", "/api/v1/jobs/12/stop", {}, True),
    ("POST", "/api/v1/jobs", {}, False),  # no key: a second run makes a second job
    ("POST", "/api/v1/jobs", {"Idempotency-Key": "  "}, False),
    ("POST", "/api/v1/jobs/12/restart", KEY, False),
    ("POST", "/jobs/new/", KEY, False),  # the page's form has no key
    ("POST", "/jobs/12/stop/", {}, False),
    ("PATCH", "/api/v1/x", {}, False),
]


@pytest.mark.parametrize(("method", "path", "headers", "expected"), CASES)
def test_what_is_run_again(method, path, headers, expected):
    assert safe_to_repeat(method, path, headers) is expected
