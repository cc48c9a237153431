"""Several pods' log lines in one request are stored together (jobs.actions.logs.append_many):
the same rows as one by one, in statements that do not grow with the pods; a moved sequence
or a bad item sends them back one by one, where each is settled alone."""

import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from agents.actions import store_logs
from jobs.models import Job, LogChunk, Pod
from policy.faulttolerance.policy import FtConfig
from protocol.batches import parse_log_batch
from tests.agents.conftest import post, register
from tests.faulttolerance.conftest import make_ft_job

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HANG = FtConfig(enabled=True, hang_detection=True, hang_timeout=600)


@pytest.fixture
def placed(client, researcher, workspace, quota):
    """A node and its token, and a maker of one-worker running jobs on it (a GPU each)."""
    node, token = register(client)
    gpus = iter(range(8))

    def job(ft: FtConfig | None = None, **fields) -> Pod:
        _, (pod,) = make_ft_job(
            owner=researcher,
            workspace=workspace,
            quota=quota,
            nodes=[node],
            ft=ft,
            first_gpu=next(gpus),
            **fields,
        )
        return pod

    return node, token, job


def stream(pod: Pod, first_seq: int, lines: list[str]) -> dict:
    return {"pod_id": pod.pk, "attempt": pod.attempt, "first_seq": first_seq, "lines": lines}


SHAPES = [  # (first lines, cut line indices, the log ends)
    (["start", "step 1"], [], False),
    (["a long line, cut", "…its tail", "done"], [0], True),
    (["only line"], [], True),
]


def _rows(pods: list[Pod]) -> list[tuple]:
    out = []
    for pod in pods:
        pod.refresh_from_db()
        chunks = LogChunk.objects.filter(pod=pod).order_by("seq_start")
        out.append(
            (
                pod.log_next_seq,
                pod.recent_line_hashes,
                pod.logs_delivered,
                [(c.seq_start, c.seq_end, c.text, c.joins, c.attempt) for c in chunks],
            )
        )
    return out


def _body(pods: list[Pod]) -> list[dict]:
    return [
        {**stream(pod, 0, lines), "continued": cut, "end": ends}
        for pod, (lines, cut, ends) in zip(pods, SHAPES, strict=True)
    ]


def test_together_leaves_the_same_rows_as_one_by_one(client, placed):
    _, token, job = placed
    together = [job() for _ in SHAPES]
    alone = [job() for _ in SHAPES]

    response = post(client, "logs/", {"batches": _body(together)}, token)
    assert response.status_code == 200
    assert response.json() == {
        "acks": {str(p.pk): len(s[0]) for p, s in zip(together, SHAPES, strict=True)},
        "rejected": {},
        "refused": {},
    }
    for batch in _body(alone):
        assert post(client, "logs/", {"batches": [batch]}, token).status_code == 200

    assert _rows(together) == _rows(alone)
    assert [r[2] for r in _rows(together)] == [False, True, True]  # the log's end noted
    assert _rows(together)[1][3][0][3] == [0]  # the cut line, by sequence number


@pytest.mark.parametrize("pods", [2, 8])
def test_statements_do_not_grow_with_the_pods(client, placed, django_assert_num_queries, pods):
    _, token, job = placed
    workers = [job() for _ in range(pods)]
    body = {"batches": [stream(w, 0, [f"line {i}" for i in range(50)]) for w in workers]}
    # auth, pods; savepoint, one compare-and-set UPDATE, one INSERT, release
    with django_assert_num_queries(6):
        response = post(client, "logs/", body, token)
    assert response.status_code == 200
    assert LogChunk.objects.count() == pods


def test_new_distinct_lines_push_each_hang_deadline(client, placed):
    _, token, job = placed
    watched = [job(HANG, hang_deadline=T0) for _ in range(2)]
    unwatched = job()  # no hang detection: no deadline to move
    with time_machine.travel(T0 + timedelta(seconds=10), tick=False):
        body = {"batches": [stream(p, 0, ["epoch 1 begins"]) for p in [*watched, unwatched]]}
        assert post(client, "logs/", body, token).status_code == 200
    deadlines = Job.objects.filter(pk__in=[p.job_id for p in watched])
    assert set(deadlines.values_list("hang_deadline", flat=True)) == {T0 + timedelta(seconds=610)}
    assert Job.objects.get(pk=unwatched.job_id).hang_deadline is None


def test_a_moved_sequence_sends_them_one_by_one(placed):
    """Another request stored a pod's first lines after this one read the pods: nothing of
    the batch is kept; one by one, the others are stored and that pod acknowledged where its
    row says."""
    node, _, job = placed
    moved, other = job(), job()
    loaded = {
        p.pk: p for p in Pod.objects.filter(pk__in=[moved.pk, other.pk]).select_related("job")
    }
    # The row's sequence decides, not the chunks (no unique conflict would catch it here).
    Pod.objects.filter(pk=moved.pk).update(log_next_seq=2)

    items = parse_log_batch({"batches": [stream(p, 0, ["a", "b", "c"]) for p in (moved, other)]})
    ack = store_logs(node, items, T0, pods=loaded)

    assert ack.acks == {moved.pk: 2, other.pk: 3}
    assert not LogChunk.objects.filter(pod=moved).exists()
    assert LogChunk.objects.filter(pod=other).count() == 1


def test_a_bad_item_is_refused_alone(client, placed):
    """A pod whose row says nothing is stored but whose first chunk exists (the unique
    (pod, seq_start) refuses the insert): the batch fails, and one by one only that pod is
    refused."""
    _, token, job = placed
    bad, good, also_good = job(), job(), job()
    LogChunk.objects.create(pod=bad, attempt=1, seq_start=0, seq_end=0, text="old\n")

    body = {"batches": [stream(p, 0, ["x", "y"]) for p in (good, bad, also_good)]}
    response = post(client, "logs/", body, token)

    assert response.status_code == 200
    assert response.json()["acks"] == {str(good.pk): 2, str(also_good.pk): 2}
    assert response.json()["refused"] == {
        str(bad.pk): "the console could not apply the log lines (IntegrityError)"
    }
    assert LogChunk.objects.filter(pod__in=[good, also_good]).count() == 2
    assert Pod.objects.get(pk=bad.pk).log_next_seq == 0


def test_a_pod_named_twice_is_stored_one_by_one_with_the_others_together(client, placed):
    _, token, job = placed
    twice, once, again = job(), job(), job()
    body = {
        "batches": [
            stream(twice, 0, ["1", "2"]),
            stream(once, 0, ["a"]),
            stream(twice, 2, ["3"]),
            stream(again, 0, ["b"]),
        ]
    }
    response = post(client, "logs/", body, token)
    assert response.json()["acks"] == {str(twice.pk): 3, str(once.pk): 1, str(again.pk): 1}
    chunks = LogChunk.objects.filter(pod=twice).order_by("seq_start")
    assert [(c.seq_start, c.text) for c in chunks] == [(0, "1\n2\n"), (2, "3\n")]
    assert [c.text for c in LogChunk.objects.filter(pod__in=[once, again]).order_by("pod")] == [
        "a\n",
        "b\n",
    ]


@pytest.mark.django_db(transaction=True)
def test_the_same_pods_sent_at_once_are_stored_once(placed):
    """Three requests carrying the same three pods' lines (in two orders) at the same
    moment: each line is stored once and every request is acknowledged the same."""
    from django.test import Client

    from tests.agents.conftest import run_together

    _, token, job = placed
    pods = [job() for _ in range(3)]
    lines = [f"line {i}" for i in range(100)]
    forward = {"batches": [stream(p, 0, lines) for p in pods]}
    backward = {"batches": [stream(p, 0, lines) for p in reversed(pods)]}

    def send(body):
        return lambda: post(Client(), "logs/", body, token).json()["acks"]

    results = run_together(send(forward), send(backward), send(forward))
    assert [kind for kind, _ in results] == ["ok", "ok", "ok"], results
    assert all(acks == {str(p.pk): 100 for p in pods} for _, acks in results)
    for pod in pods:
        (chunk,) = LogChunk.objects.filter(pod=pod)
        assert chunk.text.splitlines() == lines


def test_hostile_lines_together_are_repaired_as_one_by_one(client, placed, caplog):
    """A NUL byte, a lone surrogate (as a hostile agent's JSON escape), a line over the
    length limit: several pods' lines stored together keep what one by one keeps."""
    _, token, job = placed
    hostile = ["a\x00b", "x" * 40000, "\ud800", "é😀"]
    together, alone = [job(), job()], [job(), job()]

    def body(pods) -> str:
        return json.dumps({"batches": [stream(p, 0, hostile) for p in pods]})

    assert "\\ud800" in body(together)
    response = post(client, "logs/", body(together), token)
    assert response.status_code == 200, response.content
    assert not response.json()["refused"]
    assert "together failed" not in caplog.text  # stored together, not by the fallback
    for pod in alone:
        assert post(client, "logs/", body([pod]), token).status_code == 200
    assert _rows(together) == _rows(alone)
    assert "\x00" not in _rows(together)[0][3][0][2]
