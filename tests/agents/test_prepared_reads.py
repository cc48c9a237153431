"""Reads compiled once per shape (jobs.prepared) give what the queryset they stand for gives:
the same pods with every field of the pod and of its job, the job loaded with it, whatever
the values of a shape seen before; an empty list; a builder that uses a value twice (not
preparable: read as before); other threads on their own connections; a bounded memory."""

import pytest

from agents.heartbeat import actions as heartbeat
from cluster.models import Node
from jobs.models import Pod
from jobs.prepared import PreparedRead
from policy.statuses import PodStatus
from protocol import limits
from tests.agents.conftest import run_together


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


def _as_read(pods) -> dict[int, tuple[dict, dict]]:
    return {p.pk: (_fields(p), _fields(p.job)) for p in pods}


def _orm(node_id: int, named: list[int]) -> dict[int, tuple[dict, dict]]:
    from django.db.models import Q

    query = Q(node_id=node_id, status__in=heartbeat._ACTIVE) | Q(pk__in=named)
    return _as_read(Pod.objects.filter(query).select_related("job"))


@pytest.fixture
def nodes(db) -> list[Node]:
    return [Node.objects.create(name=f"n{i}", gpus=8) for i in range(3)]


@pytest.fixture
def placed(nodes, job_factory) -> list[Pod]:
    pods = []
    for i, node in enumerate(nodes):
        _, made = job_factory([node, node], env={"SEED": str(i), "TEXT": "ünïcode"})
        pods += made
    _, ended = job_factory([nodes[0]], pod_status=PodStatus.SUCCEEDED)
    return pods + ended


def test_every_shape_and_value_reads_what_the_queryset_reads(nodes, placed):
    ended = placed[-1].pk
    cases = [
        (nodes[0].pk, []),
        (nodes[1].pk, []),  # the same shape, another node
        (nodes[0].pk, [placed[2].pk]),  # another node's pod, named
        (nodes[2].pk, [ended]),  # an ended pod, named
        (nodes[1].pk, [ended, placed[0].pk, 10**9]),  # and an id that is no pod
        (nodes[2].pk, [placed[0].pk, placed[0].pk, ended]),  # a repeated id
    ]
    for node_id, named in cases * 2:  # the second round runs every shape prepared
        read = heartbeat._live_or_named_pods(node_id, named)
        assert _as_read(read) == _orm(node_id, named), (node_id, named)


def test_the_job_comes_with_its_pod_in_one_statement(nodes, placed, django_assert_num_queries):
    heartbeat._live_or_named_pods(nodes[0].pk, [placed[2].pk])  # prepared
    with django_assert_num_queries(1):
        read = heartbeat._live_or_named_pods(nodes[1].pk, [placed[0].pk])
        envs = sorted(p.job.env["SEED"] for p in read)
    assert envs == ["0", "1", "1"]


def test_an_empty_list_that_empties_the_read(nodes, placed):
    assert heartbeat._live_pods_of_jobs(nodes[0].pk, []) == []
    job_id = placed[0].job_id
    read = heartbeat._live_pods_of_jobs(nodes[0].pk, [job_id])
    assert sorted(p.pk for p in read) == sorted(p.pk for p in placed[:2])


def test_a_builder_that_uses_a_value_twice_is_read_as_before(nodes, placed):
    twice = PreparedRead(
        lambda pod_id: Pod.objects.filter(pk=pod_id) | Pod.objects.filter(job_id=pod_id)
    )
    first = placed[0]
    assert {p.pk for p in twice(first.pk)} == {
        p.pk for p in Pod.objects.filter(pk=first.pk) | Pod.objects.filter(job_id=first.pk)
    }
    assert list(twice._shapes.values()) == [None]  # not prepared: built at each run


@pytest.mark.django_db(transaction=True)
def test_other_threads_read_on_their_own_connections(nodes, placed):
    expected = _orm(nodes[1].pk, [placed[0].pk])
    heartbeat._live_or_named_pods(nodes[0].pk, [placed[2].pk])  # prepared in this thread

    def read():
        return _as_read(heartbeat._live_or_named_pods(nodes[1].pk, [placed[0].pk]))

    results = run_together(read, read)
    assert results == [("ok", expected), ("ok", expected)]


def test_the_shapes_kept_are_bounded(nodes, placed, monkeypatch):
    monkeypatch.setattr(limits, "PREPARED_SHAPES", 3)
    read = PreparedRead(lambda ids: Pod.objects.filter(pk__in=ids).order_by())
    for size in range(1, 8):
        ids = [p.pk for p in placed[:size]]
        assert sorted(p.pk for p in read(ids)) == sorted(ids)
        assert len(read._shapes) <= 3
