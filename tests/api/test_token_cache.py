"""API tokens cached per process (accounts.versions): a cached token costs no query, and a
revoked token, a deactivated user or a deleted token stops working at once."""

import pytest

from accounts.actions import revoke_api_tokens
from accounts.api_auth import TOKENS
from accounts.models import ApiToken
from tests.redis_store import URL, redis_or_skip

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def version_store(settings):
    redis_or_skip(URL, " for the version store")
    settings.VERSION_STORE_URL = URL
    TOKENS.clear()
    yield
    TOKENS.clear()


def _calls(api, django_assert_num_queries, queries: int) -> None:
    with django_assert_num_queries(queries):
        assert api.get("/api/v1/me").status_code == 200


def _queries_of(api, django_assert_num_queries) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        assert api.get("/api/v1/me").status_code == 200
    return len(ctx.captured_queries)


def test_a_cached_token_costs_no_query(api, django_assert_num_queries):
    first = _queries_of(api, django_assert_num_queries)  # loads (and touches) the token
    second = _queries_of(api, django_assert_num_queries)
    assert second == first - 2  # neither the token's row nor its last-used time again


@pytest.mark.parametrize("change", ["revoke", "deactivate", "delete"])
def test_a_revoked_token_stops_working_at_once(
    api, researcher, change, django_capture_on_commit_callbacks
):
    assert api.get("/api/v1/me").status_code == 200
    assert api.get("/api/v1/me").status_code == 200  # cached now
    with django_capture_on_commit_callbacks(execute=True):
        if change == "revoke":
            revoke_api_tokens(ApiToken.objects.filter(user=researcher))
        elif change == "deactivate":
            researcher.is_active = False
            researcher.save()
        else:
            ApiToken.objects.filter(user=researcher).delete()
    assert api.get("/api/v1/me").status_code == 401


def test_a_request_reads_the_versions_once_and_the_next_sees_a_bump():
    """Every cache's version is read at a request's first use of any and kept until it
    ends (accounts.versions): a bump landing meanwhile is seen by the next request."""
    from accounts.actions import TOKENS_VERSION
    from accounts.versions import _incr, begin_request, current, end_request

    begin_request()
    try:
        before = current(TOKENS_VERSION)
        _incr(TOKENS_VERSION)
        assert current(TOKENS_VERSION) == before
    finally:
        end_request()
    assert current(TOKENS_VERSION) != before
    begin_request()
    try:
        assert current(TOKENS_VERSION) == current(TOKENS_VERSION) != before
    finally:
        end_request()
