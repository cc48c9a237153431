"""Admission facts cached per process (jobs.admission.cache): a submission with its facts
cached reads none of them, and every change of what they are read from (a quota resized,
a member removed, a workspace unbound, a node lost, smaller or gone) is seen by the next
submission once it commits, including one committed by another connection."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.api_auth import TOKENS
from cluster.actions import mark_node_lost, mark_node_not_ready, record_node_alive
from cluster.models import Node
from jobs.admission.cache import FACTS
from quotas import actions
from quotas.models import Membership
from tests.api.conftest import GOOD, error_of, post
from tests.redis_store import URL, redis_or_skip

pytestmark = pytest.mark.django_db
FACT_TABLES = ('FROM "quotas_quota"', 'FROM "quotas_workspace"', 'FROM "cluster_node"')


@pytest.fixture(autouse=True)
def version_store(settings):
    redis_or_skip(URL, " for the version store")
    settings.VERSION_STORE_URL = URL
    FACTS.clear()
    TOKENS.clear()
    yield
    FACTS.clear()
    TOKENS.clear()


def _fact_reads(api, body=GOOD) -> tuple[int, object]:
    with CaptureQueriesContext(connection) as ctx:
        response = post(api, "/api/v1/jobs", body)
    reads = [q["sql"] for q in ctx.captured_queries if any(t in q["sql"] for t in FACT_TABLES)]
    return len(reads), response


def _committed(change, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        change()


def test_cached_facts_cost_no_query(api, quota, node):
    first, response = _fact_reads(api)
    assert response.status_code == 201 and first == 3
    again, response = _fact_reads(api)
    assert response.status_code == 201 and again == 0


def test_a_quota_resize_is_seen_by_the_next_submission(
    api, quota, node, django_capture_on_commit_callbacks
):
    big = GOOD | {"gpus_per_worker": 8}  # within the quota of 16, not of 4
    assert post(api, "/api/v1/jobs", big).status_code == 201
    assert _fact_reads(api, big)[0] == 0  # cached
    _committed(lambda: actions.update_quota(quota, gpus=4), django_capture_on_commit_callbacks)
    reads, response = _fact_reads(api, big)
    assert reads == 3
    error_of(response, 400, "validation_error")


def test_a_removed_member_is_refused_at_once(
    api, researcher, quota, node, django_capture_on_commit_callbacks
):
    assert post(api, "/api/v1/jobs", GOOD).status_code == 201
    membership = Membership.objects.get(user=researcher)
    _committed(lambda: actions.remove_member(membership), django_capture_on_commit_callbacks)
    error_of(post(api, "/api/v1/jobs", GOOD), 400, "validation_error")


def test_an_unbound_workspace_is_refused_at_once(
    api, workspace, quota, node, django_capture_on_commit_callbacks
):
    assert post(api, "/api/v1/jobs", GOOD).status_code == 201
    _committed(lambda: actions.bind_quotas(workspace, []), django_capture_on_commit_callbacks)
    error_of(post(api, "/api/v1/jobs", GOOD), 400, "validation_error")
    _committed(lambda: actions.bind_quotas(workspace, [quota]), django_capture_on_commit_callbacks)
    assert post(api, "/api/v1/jobs", GOOD).status_code == 201


def _no_node_fits(response) -> None:
    error = error_of(response, 400, "validation_error")
    assert "node" in str(error).lower(), error


@pytest.mark.parametrize("change", ["lost", "deleted", "smaller"])
def test_a_node_gone_or_smaller_is_seen_by_the_next_submission(
    api, quota, node, change, django_capture_on_commit_callbacks
):
    eight = GOOD | {"gpus_per_worker": 8}
    assert post(api, "/api/v1/jobs", eight).status_code == 201
    assert _fact_reads(api, eight)[0] == 0  # cached
    now = timezone.now()

    def gone() -> None:
        if change == "lost":
            Node.objects.filter(pk=node.pk).update(heartbeat_deadline=now, last_heartbeat_at=now)
            assert mark_node_not_ready(node.pk, now + timedelta(seconds=1))
            assert mark_node_lost(node.pk, now + timedelta(seconds=1))
        elif change == "deleted":
            Node.objects.get(pk=node.pk).delete()
        else:  # its agent now reports 4 GPUs
            facts = {"gpu_type": "H200", "gpus": 4, "cpus": 128, "memory_gb": 1024}
            record_node_alive(node.pk, facts, now=now, deadline=now, digest="d")

    _committed(gone, django_capture_on_commit_callbacks)
    _no_node_fits(post(api, "/api/v1/jobs", eight))


def test_a_lost_node_back_is_seen_by_the_next_submission(
    api, quota, node, django_capture_on_commit_callbacks
):
    eight = GOOD | {"gpus_per_worker": 8}
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(state="Lost")
    _no_node_fits(post(api, "/api/v1/jobs", eight))  # cached: no node
    facts = {"gpu_type": "H200", "gpus": 8, "cpus": 128, "memory_gb": 1024}
    _committed(
        lambda: record_node_alive(node.pk, facts, now=now, deadline=now, digest="d"),
        django_capture_on_commit_callbacks,
    )
    assert post(api, "/api/v1/jobs", eight).status_code == 201


def test_a_heartbeat_that_changes_nothing_admission_reads_keeps_the_cache(
    api, quota, node, django_capture_on_commit_callbacks
):
    assert post(api, "/api/v1/jobs", GOOD).status_code == 201
    now = timezone.now()
    facts = {"gpu_type": "H200", "gpus": 8, "cpus": 128, "memory_gb": 1024, "agent_version": "2"}
    with CaptureQueriesContext(connection) as ctx:
        _committed(
            lambda: record_node_alive(node.pk, facts, now=now, deadline=now, digest="e"),
            django_capture_on_commit_callbacks,
        )
    assert len(ctx.captured_queries) == 1  # one UPDATE, as before the cache
    assert _fact_reads(api)[0] == 0


@pytest.mark.django_db(transaction=True)
def test_a_change_committed_by_another_connection_is_seen(api, quota, node, settings):
    """The resize commits in another thread, on its own database connection; its bump
    lands after its commit, and this connection's next submission reads the new quota."""
    if connection.vendor == "sqlite":
        pytest.skip("an in-memory SQLite database is not shared between connections")
    settings.CONSOLE_LOOPS = "inprocess"  # no loop runs: no cycle reads after each commit
    big = GOOD | {"gpus_per_worker": 8}
    assert post(api, "/api/v1/jobs", big).status_code == 201
    assert _fact_reads(api, big)[0] == 0

    def resize() -> None:
        from django.db import connection as theirs

        try:
            actions.update_quota(type(quota).objects.get(pk=quota.pk), gpus=4)
        finally:
            theirs.close()

    other = threading.Thread(target=resize)
    other.start()
    other.join()
    error_of(post(api, "/api/v1/jobs", big), 400, "validation_error")


def _kube_gpus(count: int) -> list[dict]:
    return [{"index": i, "uuid": f"k-{i}", "name": "NVIDIA H200"} for i in range(count)]


def test_a_kubernetes_node_tells_admission_only_when_its_kind_or_size_changes():
    from cluster.actions import pool_changed, sync_cluster_node

    heard = []

    def hear(**kwargs) -> None:
        heard.append(kwargs["sender"])

    now = timezone.now()
    facts = {
        "resource_type": "Lingjun",
        "gpu_type": "H200",
        "gpus": 8,
        "cpus": 64,
        "memory_gb": 512,
    }
    pool_changed.connect(hear, weak=False, dispatch_uid="test-kube-pool")
    try:
        sync_cluster_node("k1", facts, _kube_gpus(8), alive=True, now=now, deadline=now)
        sync_cluster_node("k1", facts, _kube_gpus(8), alive=True, now=now, deadline=now)
        assert heard == []  # created (post_save tells), then the same facts: nothing
        smaller = facts | {"gpus": 4}
        sync_cluster_node("k1", smaller, _kube_gpus(4), alive=True, now=now, deadline=now)
        assert len(heard) == 1
        Node.objects.filter(name="k1").update(state="Lost")
        sync_cluster_node("k1", smaller, _kube_gpus(4), alive=False, now=now, deadline=now)
        assert len(heard) == 1  # still Lost: nothing admission reads changed
        sync_cluster_node("k1", smaller, _kube_gpus(4), alive=True, now=now, deadline=now)
        assert len(heard) == 2  # back
    finally:
        pool_changed.disconnect(dispatch_uid="test-kube-pool")
