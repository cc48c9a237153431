"""Every response under /api/v1/ is the API's JSON error shape (or a documented body) with a
JSON content type, whatever the path holds: a newline, a carriage return, a line separator,
a non-ASCII digit. Found by Schemathesis (the HTML 404 page of the site, and a 500 for
"²", which `str.isdigit` calls a digit but `int` refuses)."""

import pytest
import requests

from tests.api.conftest import error_of

pytestmark = pytest.mark.django_db

ODD_PATHS = [
    "/api/v1/jobs/9%0Ax/stop",
    "/api/v1/jobs/9%0Ax/stop/",
    "/api/v1/jobs/9%0A",
    "/api/v1/jobs%0A",
    "/api/v1/%0A",
    "/api/v1/jobs/1/logs%0D%0A",
    "/api/v1/jobs/%E2%80%A8/events",
    "/api/v1/jobs/%C2%B2",
    "/api/v1/nodes/%0A/x",
    "/api/v1/quotas/%C2%B2/queue",
    "/api/v1/quotas/%C2%B2",
    "/api/v1/agent/%0A",
    "/api/v1/agent/heartbeat/%0A",
]


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("path", ODD_PATHS)
def test_odd_paths_get_the_api_error_shape(api, job, path, method):
    response = api.generic(method, path)
    assert response.status_code in (404, 405), (path, response.content[:300])
    code = "not_found" if response.status_code == 404 else "method_not_allowed"
    error_of(response, response.status_code, code)


@pytest.mark.parametrize("query", ["quota=%C2%B2", "workspace=%D9%A1", "quota=%EF%BC%91"])
def test_non_ascii_digits_in_filters_are_names_not_a_500(api, job, query):
    response = api.get(f"/api/v1/jobs?{query}")
    assert response.status_code == 200, response.content[:300]
    assert response.json()["jobs"] == []


def test_an_encoded_newline_over_http_gets_json(live_server, transactional_db):
    """The same through a real HTTP server (the path is decoded by the WSGI server)."""
    for path in ("/api/v1/jobs/9%0Ax/stop", "/api/v1/jobs/9%0Dx", "/api/v1/quotas/%C2%B2/queue"):
        response = requests.get(f"{live_server.url}{path}", timeout=30)
        assert response.headers["Content-Type"] == "application/json", path
        assert response.status_code in (401, 404), path  # unknown, or known but no token
        assert set(response.json()["error"]) >= {"code", "message", "field"}
