"""POST /api/v1/agent/logs/: each sequence stored once, gaps refused, foreign pods rejected."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import LogChunk, Pod
from policy.statuses import JobStatus, PodStatus
from tests.agents.conftest import post, register

pytestmark = pytest.mark.django_db


def lines(start: int, end: int) -> list[str]:
    return [f"line {i}" for i in range(start, end)]


def send(client, token, pod, first_seq, text_lines, attempt=None):
    batch = {
        "pod_id": pod.pk,
        "attempt": attempt or pod.attempt,
        "first_seq": first_seq,
        "lines": text_lines,
    }
    return post(client, "logs/", {"batches": [batch]}, token)


def stored(pod) -> list[str]:
    chunks = LogChunk.objects.filter(pod=pod).order_by("seq_start")
    return "".join(c.text for c in chunks).splitlines()


@pytest.fixture
def setup(client, job_factory):
    node, token = register(client)
    _, (pod,) = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    return node, token, pod


def test_lines_are_stored_and_acknowledged(client, setup):
    _, token, pod = setup
    response = send(client, token, pod, 0, lines(0, 5))
    assert response.status_code == 200
    assert response.json() == {"acks": {str(pod.pk): 5}, "rejected": {}, "refused": {}}
    (chunk,) = LogChunk.objects.filter(pod=pod)
    assert (chunk.seq_start, chunk.seq_end, chunk.attempt) == (0, 4, 1)
    assert chunk.text == "line 0\nline 1\nline 2\nline 3\nline 4\n"
    assert Pod.objects.get(pk=pod.pk).log_next_seq == 5


def test_a_resent_batch_is_stored_once(client, setup):
    _, token, pod = setup
    send(client, token, pod, 0, lines(0, 5))
    response = send(client, token, pod, 0, lines(0, 5))
    assert response.json()["acks"] == {str(pod.pk): 5}
    assert LogChunk.objects.filter(pod=pod).count() == 1
    assert stored(pod) == lines(0, 5)


def test_an_overlapping_batch_stores_only_its_new_tail(client, setup):
    _, token, pod = setup
    send(client, token, pod, 0, lines(0, 5))
    response = send(client, token, pod, 3, lines(3, 8))
    assert response.json()["acks"] == {str(pod.pk): 8}
    assert stored(pod) == lines(0, 8)
    assert [(c.seq_start, c.seq_end) for c in LogChunk.objects.filter(pod=pod)] == [
        (0, 4),
        (5, 7),
    ]


def test_a_gap_is_not_accepted_and_the_ack_says_where_to_resume(client, setup):
    _, token, pod = setup
    send(client, token, pod, 0, lines(0, 5))
    response = send(client, token, pod, 10, lines(10, 13))
    assert response.status_code == 200
    assert response.json()["acks"] == {str(pod.pk): 5}
    assert stored(pod) == lines(0, 5)
    # Resending from the acknowledged point fills the log in order.
    send(client, token, pod, 5, lines(5, 13))
    assert stored(pod) == lines(0, 13)


def test_several_batches_of_one_pod_in_one_request(client, setup):
    _, token, pod = setup
    body = {
        "batches": [
            {"pod_id": pod.pk, "attempt": 1, "first_seq": 0, "lines": lines(0, 3)},
            {"pod_id": pod.pk, "attempt": 1, "first_seq": 3, "lines": lines(3, 6)},
            {"pod_id": pod.pk, "attempt": 1, "first_seq": 9, "lines": lines(9, 10)},
        ]
    }
    response = post(client, "logs/", body, token)
    assert response.json()["acks"] == {str(pod.pk): 6}
    assert stored(pod) == lines(0, 6)


def test_hostile_text_is_stored_verbatim(client, setup):
    _, token, pod = setup
    hostile = ["<script>alert(1)</script>", '<div hx-get="/x">', "\x1b[31mred\x1b[0m", "", "é😀"]
    send(client, token, pod, 0, hostile)
    assert LogChunk.objects.get(pod=pod).text == "".join(f"{line}\n" for line in hostile)


def test_logs_of_a_finished_pod_are_still_accepted(client, setup):
    _, token, pod = setup
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.SUCCEEDED)
    assert send(client, token, pod, 0, lines(0, 2)).json()["acks"] == {str(pod.pk): 2}


def test_foreign_unknown_and_stale_pods_are_rejected(client, setup, job_factory):
    _node, token, pod = setup
    other, _ = register(client, "other")
    _, (foreign,) = job_factory([other], pod_status=PodStatus.RUNNING)
    body = {
        "batches": [
            {"pod_id": foreign.pk, "attempt": 1, "first_seq": 0, "lines": ["x"]},
            {"pod_id": 99999, "attempt": 1, "first_seq": 0, "lines": ["x"]},
            {"pod_id": pod.pk, "attempt": 2, "first_seq": 0, "lines": ["x"]},
        ]
    }
    response = post(client, "logs/", body, token)
    assert response.status_code == 200
    assert response.json() == {
        "acks": {},
        "rejected": {
            str(foreign.pk): "pod is not placed on this node",
            "99999": "unknown pod",
            str(pod.pk): "stale attempt 2; the pod is attempt 1",
        },
        "refused": {},
    }
    assert not LogChunk.objects.exists()


def test_auth_is_required(client, setup):
    _, _, pod = setup
    response = post(
        client,
        "logs/",
        {"batches": [{"pod_id": pod.pk, "attempt": 1, "first_seq": 0, "lines": ["x"]}]},
    )
    assert response.status_code == 401


UNORDERED = "continued must be increasing"  # indices of cut lines, in order, in range


@pytest.mark.parametrize(
    ("batch", "reason"),
    [
        ({"first_seq": -1, "lines": ["x"]}, "first_seq: Input should be greater than"),
        ({"first_seq": 0, "lines": []}, "a batch holds at least one line, unless it only says end"),
        ({"first_seq": 0, "lines": ["x"] * 1001}, "lines: List should have at most 1000"),
        ({"first_seq": 0, "lines": [7]}, "lines.0: Input should be a valid string"),
        ({"first_seq": 0, "lines": ["x", "y"], "continued": [2]}, UNORDERED),
        ({"first_seq": 0, "lines": ["x", "y"], "continued": [1, 0]}, UNORDERED),
    ],
)
def test_an_invalid_stream_is_refused_alone_and_noted_on_its_pod(client, setup, batch, reason):
    _, token, pod = setup
    good = {"pod_id": pod.pk, "attempt": 1, "first_seq": 0, "lines": ["kept"]}
    other = Pod.objects.create(
        job=pod.job, attempt=1, rank=1, node=pod.node, charged_quota=pod.charged_quota
    )
    response = post(
        client, "logs/", {"batches": [{**good, "pod_id": other.pk, **batch}, good]}, token
    )
    assert response.status_code == 200
    body = response.json()
    assert body["acks"] == {str(pod.pk): 1}
    assert body["refused"][str(other.pk)].startswith(reason)
    assert [c.pod_id for c in LogChunk.objects.all()] == [pod.pk]
    other.refresh_from_db()
    assert other.report_refused.startswith(f"log lines refused: {reason}")


def test_text_is_repaired_not_refused(client, setup):
    _, token, pod = setup
    lines = ["a\x00b", "x" * 40000, "one\ntwo", "\ud800"]
    # json.dumps writes the lone surrogate as the escape "\\ud800", as a hostile agent would.
    body = json.dumps(
        {"batches": [{"pod_id": pod.pk, "attempt": 1, "first_seq": 0, "lines": lines}]}
    )
    assert "\\ud800" in body
    response = post(client, "logs/", body, token)
    assert response.status_code == 200, response.content
    (chunk,) = LogChunk.objects.all()
    stored = chunk.text.split("\n")[:-1]
    assert stored[0] == "a\u2400b"
    assert len(stored[1]) == 32 * 1024 and stored[1].endswith("…")
    assert stored[2:] == ["one\u2424two", "\ufffd"]


def test_a_body_over_the_upload_limit_is_413(client, setup, settings):
    _, token, pod = setup
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = send(client, token, pod, 0, ["x" * 500, "y" * 500])
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"


@pytest.mark.parametrize("pods", [1, 4])
def test_query_count_is_constant_per_pod(client, job_factory, django_assert_num_queries, pods):
    node, token = register(client)
    _, workers = job_factory([node] * pods, pod_status=PodStatus.RUNNING)
    body = {
        "batches": [
            {"pod_id": w.pk, "attempt": 1, "first_seq": 0, "lines": lines(0, 500)} for w in workers
        ]
    }
    # auth, pods; savepoint, compare-and-set on log_next_seq, insert, release: one pod's
    # alone, several pods' together (tests/agents/test_logs_together.py)
    with django_assert_num_queries(2 + 4):
        response = post(client, "logs/", body, token)
    assert response.status_code == 200
    assert LogChunk.objects.count() == pods


@pytest.mark.django_db(transaction=True)
def test_the_same_batch_sent_twice_at_once_is_stored_once(researcher, workspace, quota):
    from django.test import Client

    from tests.agents.conftest import make_job, run_together

    node, token = register(Client())
    _, (pod,) = make_job(
        owner=researcher, workspace=workspace, quota=quota, nodes=[node], status=JobStatus.RUNNING
    )

    def resend():
        return send(Client(), token, pod, 0, lines(0, 200)).json()["acks"]

    results = run_together(resend, resend, resend)
    assert [kind for kind, _ in results] == ["ok", "ok", "ok"], results
    assert all(acks == {str(pod.pk): 200} for _, acks in results)
    assert stored(pod) == lines(0, 200)
    assert LogChunk.objects.filter(pod=pod).count() == 1


def test_a_line_cut_by_the_agent_downloads_whole(client, setup, researcher):
    """The agent cuts lines longer than its limit and says which pieces continue; the raw
    download joins them again: the worker's output, unchanged."""
    from django.test import Client
    from django.urls import reverse

    _, token, pod = setup
    send(client, token, pod, 0, ["first"])
    # One 40,000-character line in three pieces, the middle one in the next batch.
    batch = {"pod_id": pod.pk, "attempt": 1, "first_seq": 1, "lines": ["a" * 16384, "b" * 16384]}
    post(client, "logs/", {"batches": [batch | {"continued": [0, 1]}]}, token)
    batch = {"pod_id": pod.pk, "attempt": 1, "first_seq": 3, "lines": ["c" * 7232, "last"]}
    post(client, "logs/", {"batches": [batch]}, token)
    # A re-sent overlapping batch keeps the joins of what it adds, not of what it repeats.
    again = {
        "pod_id": pod.pk,
        "attempt": 1,
        "first_seq": 2,
        "lines": ["b" * 16384, "c" * 7232, "last", "tail"],
    }
    post(client, "logs/", {"batches": [again | {"continued": [0]}]}, token)
    viewer = Client()
    viewer.force_login(researcher)
    response = viewer.get(reverse("web:logs-raw", args=[pod.job_id]))
    body = b"".join(response.streaming_content).decode()
    assert body == "first\n" + "a" * 16384 + "b" * 16384 + "c" * 7232 + "\nlast\ntail\n"


# --- lines riding in a heartbeat (the exit's last lines, docs/agent-protocol.md) ---


def _ride(pod, first_seq: int, text_lines: list[str]) -> dict:
    return {"pod_id": pod.pk, "attempt": pod.attempt, "first_seq": first_seq, "lines": text_lines}


def test_an_exits_last_lines_ride_in_its_heartbeat(client, setup):
    from tests.agents.conftest import facts

    _, token, pod = setup
    done = {"pod_id": pod.pk, "attempt": pod.attempt, "state": "exited", "exit_code": 0}
    body = {
        "facts": facts(),
        "workers": [{**done, "logs_delivered": True}],
        "logs": [_ride(pod, 0, ["last words", "bye"])],
    }
    with CaptureQueriesContext(connection) as queries:
        reply = post(client, "heartbeat/", body, token).json()
    # the pods the lines are for are read with the heartbeat's pods, not again
    loads = [q for q in queries.captured_queries if 'FROM "jobs_pod" INNER JOIN' in q["sql"]]
    assert len(loads) == 2  # the heartbeat's pods, and again after the exit changed them
    assert reply["takes_logs"] is True
    assert reply["logs"] == {"acks": {str(pod.pk): 2}, "rejected": {}, "refused": {}}
    pod.refresh_from_db()
    assert (pod.status, pod.log_next_seq, pod.logs_delivered) == (PodStatus.SUCCEEDED, 2, True)
    assert stored(pod) == ["last words", "bye"]
    # sent again (the reply was lost): stored once, acked the same
    again = post(client, "heartbeat/", body, token).json()
    assert again["logs"]["acks"] == {str(pod.pk): 2} and stored(pod) == ["last words", "bye"]


def test_a_bad_log_item_in_a_heartbeat_is_refused_alone(client, setup, job_factory):
    from tests.agents.conftest import facts

    node, token, pod = setup
    _, (other,) = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    exits = [
        {"pod_id": p.pk, "attempt": p.attempt, "state": "exited", "exit_code": 0,
         "logs_delivered": True}
        for p in (pod, other)
    ]  # fmt: skip
    bad = {**_ride(other, 0, ["x"]), "continued": [5]}  # an index outside its lines
    body = {"facts": facts(), "workers": exits, "logs": [_ride(pod, 0, ["fine"]), bad]}
    response = post(client, "heartbeat/", body, token)
    assert response.status_code == 200
    reply = response.json()
    assert reply["logs"]["acks"] == {str(pod.pk): 1}
    assert set(reply["logs"]["refused"]) == {str(other.pk)}
    pod.refresh_from_db()
    other.refresh_from_db()
    assert pod.status == other.status == PodStatus.SUCCEEDED  # both exits applied
    # the console did not store the other's last line: its log is not delivered
    assert (pod.logs_delivered, other.logs_delivered) == (True, False)
    assert stored(pod) == ["fine"] and stored(other) == []


def test_hostile_lines_riding_in_a_heartbeat_are_repaired_not_refused(client, setup):
    from tests.agents.conftest import facts

    _, token, pod = setup
    lines = ["a\x00b", "x" * 40000, "one\ntwo", "\ud800"]
    done = {"pod_id": pod.pk, "attempt": pod.attempt, "state": "exited", "exit_code": 0}
    body = json.dumps({"facts": facts(), "workers": [done], "logs": [_ride(pod, 0, lines)]})
    assert "\\ud800" in body
    response = post(client, "heartbeat/", body, token)
    assert response.status_code == 200, response.content
    assert response.json()["logs"]["acks"] == {str(pod.pk): 4}
    stored = LogChunk.objects.get(pod=pod).text.split("\n")[:-1]
    assert stored[0] == "a\u2400b" and stored[2:] == ["one\u2424two", "\ufffd"]
    assert len(stored[1]) == 32 * 1024
    assert Pod.objects.get(pk=pod.pk).status == PodStatus.SUCCEEDED
    # a wrong type for the whole list is the envelope's error, as for `workers`
    wrong = json.dumps({"facts": facts(), "logs": "not a list"})
    refused = post(client, "heartbeat/", wrong, token)
    assert (refused.status_code, refused.json()["error"]["field"]) == (400, "logs")
