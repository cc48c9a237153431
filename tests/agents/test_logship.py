"""LogShipper against the real logs endpoint (through the Django test client)."""

import pytest

from agents.node.client import TransportError
from agents.node.logship import LogShipper
from jobs.models import LogChunk, Pod
from policy.statuses import JobStatus, PodStatus
from protocol.agent import LogAck, LogBatch
from tests.agents.conftest import post, register

pytestmark = pytest.mark.django_db


class Console:
    """The logs endpoint as the shipper's `send`, with an optional outage."""

    def __init__(self, client, token) -> None:
        self.client = client
        self.token = token
        self.down = False
        self.lose_replies = False
        self.requests: list[LogBatch] = []

    def send(self, batch: LogBatch) -> LogAck:
        self.requests.append(batch)
        if self.down:
            raise TransportError("connection refused")
        response = post(self.client, "logs/", batch.model_dump_json(), self.token)
        assert response.status_code == 200, response.content
        if self.lose_replies:  # stored, but the agent never hears back
            raise TransportError("read timeout")
        return LogAck.model_validate_json(response.content)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def env(client, job_factory):
    node, token = register(client)
    _, (pod,) = job_factory([node], pod_status=PodStatus.RUNNING, status=JobStatus.RUNNING)
    console = Console(client, token)
    clock = Clock()
    shipper = LogShipper(console.send, clock=clock)
    shipper.open(pod.pk, pod.attempt, pod.log_next_seq)
    return shipper, console, clock, pod


def stored(pod) -> list[str]:
    return "".join(c.text for c in LogChunk.objects.filter(pod=pod)).splitlines()


def test_lines_go_out_in_order_and_are_dropped_once_acknowledged(env):
    shipper, _console, _, pod = env
    for i in range(5):
        shipper.append(pod.pk, f"line {i}")
    assert shipper.ship_once()
    assert stored(pod) == [f"line {i}" for i in range(5)]
    assert shipper.drained()
    assert not shipper.ship_once()  # nothing left to send


def test_unacknowledged_lines_are_resent_and_stored_once(env):
    shipper, console, _, pod = env
    shipper.append(pod.pk, "a")
    shipper.append(pod.pk, "b")
    console.lose_replies = True
    with pytest.raises(TransportError):
        shipper.ship_once()
    console.lose_replies = False
    shipper.append(pod.pk, "c")
    console.down = True
    with pytest.raises(TransportError):
        shipper.ship_once()
    console.down = False
    assert shipper.ship_once()
    assert [b.batches[0].first_seq for b in console.requests] == [0, 0, 0]
    assert stored(pod) == ["a", "b", "c"]
    assert LogChunk.objects.filter(pod=pod).count() == 2


def test_batches_are_due_at_1000_lines_or_after_a_second(env):
    shipper, _, clock, pod = env
    shipper.append(pod.pk, "first")
    assert not shipper._due(clock())
    clock.now = 1.0
    assert shipper._due(clock())
    shipper.ship_once()
    for i in range(999):
        shipper.append(pod.pk, str(i))
    assert not shipper._due(clock())
    shipper.append(pod.pk, "the thousandth")
    assert shipper._due(clock())
    batch = shipper.take_batch()
    assert len(batch.batches[0].lines) == 1000


def test_a_closed_stream_ships_at_once_and_is_forgotten_when_acked(env):
    shipper, _, clock, pod = env
    shipper.append(pod.pk, "bye")
    shipper.close(pod.pk)
    assert shipper._due(clock())
    shipper.ship_once()
    assert shipper._streams == {}
    shipper.append(pod.pk, "after the end")  # nowhere to go: ignored, no error
    assert shipper.take_batch() is None


def test_sequence_starts_at_the_consoles_next_seq(env, client):
    _shipper, console, _, pod = env
    Pod.objects.filter(pk=pod.pk).update(log_next_seq=0)
    post(
        client,
        "logs/",
        {"batches": [{"pod_id": pod.pk, "attempt": 1, "first_seq": 0, "lines": ["earlier"]}]},
        console.token,
    )
    second = LogShipper(console.send)
    second.open(pod.pk, 1, Pod.objects.get(pk=pod.pk).log_next_seq)
    second.append(pod.pk, "later")
    second.ship_once()
    assert stored(pod) == ["earlier", "later"]


def test_a_full_buffer_drops_lines_but_keeps_sequences_contiguous(env):
    shipper, _console, _, pod = env
    shipper.max_buffered_bytes = 100
    shipper._streams[pod.pk].limit = 100
    for i in range(30):
        shipper.append(pod.pk, f"line {i:02d}")  # 10 bytes of JSON each
    shipper.ship_once()
    shipper.append(pod.pk, "after the outage")
    shipper.ship_once()
    lines = stored(pod)
    assert lines[:10] == [f"line {i:02d}" for i in range(10)]
    assert lines[10:] == ["[agent] 20 log lines dropped: buffer full", "after the outage"]


def test_rejected_pods_are_dropped(env, client, job_factory):
    shipper, _console, _, pod = env
    other, _ = register(client, "other")
    _, (foreign,) = job_factory([other])
    shipper.open(foreign.pk, 1, 0)
    shipper.append(foreign.pk, "not mine")
    shipper.append(pod.pk, "mine")
    shipper.ship_once()
    assert list(shipper._streams) == [pod.pk] and shipper.drained()
    assert not LogChunk.objects.filter(pod=foreign).exists()


def test_an_ack_behind_the_buffer_renumbers_with_a_marker(env, client):
    shipper, _console, _, pod = env
    Pod.objects.filter(pk=pod.pk).update(log_next_seq=0)
    stream = shipper._streams[pod.pk]
    stream.base = 5  # as if lines 0-4 were acknowledged, then the console lost them
    shipper.append(pod.pk, "x")
    shipper.ship_once()  # gap: nothing stored, ack 0
    shipper.ship_once()
    assert stored(pod) == ["[agent] earlier log lines were lost", "x"]


def test_flush_sends_everything(env):
    shipper, console, _, pod = env
    for i in range(2500):
        shipper.append(pod.pk, str(i))
    assert shipper.flush(timeout=30)
    assert len(stored(pod)) == 2500
    assert [len(b.batches[0].lines) for b in console.requests] == [1000, 1000, 500]


# --- the on-disk journal, rate limit ---


def test_a_restarted_shipper_resends_journaled_lines_in_order_once(env, tmp_path):
    _shipper, console, clock, pod = env
    first = LogShipper(console.send, journal_dir=tmp_path / "logs", clock=clock)
    first.open(pod.pk, pod.attempt, pod.log_next_seq)
    for i in range(5):
        first.append(pod.pk, f"line {i}")
    first.ship_once()  # 0-4 acknowledged
    first.append(pod.pk, "[agent] stopping", False)  # an agent line among them
    for i in range(5, 8):
        first.append(pod.pk, f"line {i}")
    console.lose_replies = True  # 5-8 stored, the ack lost: then the agent is killed
    with pytest.raises(TransportError):
        first.ship_once()
    console.lose_replies = False
    first.append(pod.pk, "line 8")  # journaled, never sent
    journal = tmp_path / "logs" / f"{pod.pk}-{pod.attempt}.jsonl"
    with open(journal, "a") as f:
        f.write('[99, 99, "torn li')  # killed halfway through a write
    first.close_all()  # (the kernel closes a killed process's files)

    second = LogShipper(console.send, journal_dir=tmp_path / "logs", clock=clock)
    # 8 source lines were read (the agent line does not count): the runtime skips them.
    assert second.recover() == {pod.pk: (pod.attempt, 9)}
    second.flush(timeout=10)
    assert stored(pod) == [*(f"line {i}" for i in range(5)), "[agent] stopping"] + [
        f"line {i}" for i in range(5, 9)
    ]
    second.close(pod.pk)
    assert not journal.exists()


def test_the_journal_is_compacted_once_acknowledged(env, tmp_path, monkeypatch):
    from agents.node import logstream

    _shipper, console, clock, pod = env
    monkeypatch.setattr(logstream, "COMPACT_AFTER", 200)
    shipper = LogShipper(console.send, journal_dir=tmp_path / "logs", clock=clock)
    shipper.open(pod.pk, 1, 0)
    for i in range(50):
        shipper.append(pod.pk, f"line {i}")
    shipper.ship_once()
    shipper.append(pod.pk, "pending")
    journal = (tmp_path / "logs" / f"{pod.pk}-1.jsonl").read_text().splitlines()
    shipper.close_all()
    assert journal == ['{"base": 50, "src": 50}', '[50, 51, "pending"]']


def test_a_worker_over_its_rate_gets_an_explicit_truncation_marker(env):
    _shipper, console, clock, pod = env
    shipper = LogShipper(console.send, rate_lines=10, rate_burst=5, clock=clock)
    shipper.open(pod.pk, 1, 0)
    for i in range(20):  # a burst of 5 goes through, 15 are dropped
        shipper.append(pod.pk, f"line {i}")
    clock.now = 1.0  # ten lines' worth of tokens later
    shipper.append(pod.pk, "after")
    shipper.ship_once()
    assert stored(pod) == [
        *(f"line {i}" for i in range(5)),
        "[agent] 15 log lines dropped: over 10 lines/s",
        "after",
    ]


def test_pieces_of_a_cut_line_keep_saying_so_through_the_journal(env, tmp_path):
    """A line cut at the agent's limit reaches the console as pieces that continue, also
    after an agent restart that re-sends them from its journal."""
    from agents.node.lines import ContinuedLine
    from jobs.logview import raw_text

    _shipper, console, clock, pod = env
    first = LogShipper(console.send, journal_dir=tmp_path / "logs", clock=clock)
    first.open(pod.pk, pod.attempt, pod.log_next_seq)
    first.append(pod.pk, ContinuedLine("aaaa"))
    first.append(pod.pk, ContinuedLine("bbbb"))
    first.append(pod.pk, "cc")
    first.append(pod.pk, "next")
    console.down = True
    with pytest.raises(TransportError):
        first.ship_once()
    first.close_all()
    console.down = False
    second = LogShipper(console.send, journal_dir=tmp_path / "logs", clock=clock)
    second.recover()
    second.flush(timeout=10)
    assert console.requests[-1].batches[0].continued == [0, 1]
    assert "".join(raw_text(pod)) == "aaaabbbbcc\nnext\n"
    second.close_all()


def test_an_exit_report_says_its_log_is_delivered_only_once_every_line_is_acked(env):
    from protocol.agent import WorkerReport

    shipper, console, _, pod = env
    exited = WorkerReport(pod_id=pod.pk, attempt=pod.attempt, state="exited", exit_code=0)
    shipper.append(pod.pk, "last line")
    shipper.close(pod.pk)
    console.down = True
    with pytest.raises(TransportError):
        shipper.ship_once()
    assert not shipper.mark_delivered([exited])[0].logs_delivered  # a line still buffered
    console.down = False
    assert shipper.ship_once()
    (report,) = shipper.mark_delivered([exited])
    assert report.logs_delivered and stored(pod) == ["last line"]


def test_a_workers_lines_are_in_one_request_at_a_time(env):
    """Lines riding in a heartbeat are not also in a batch (and the other way round), so
    the acks of one worker's lines never come back out of order."""
    shipper, console, _, pod = env
    shipper.exits_ride = True
    shipper.append(pod.pk, "last line")
    shipper.close(pod.pk)
    riding = shipper.ride([pod.pk])
    assert [b.lines for b in riding] == [["last line"]]
    assert shipper.take_batch() is None and shipper.ride([pod.pk]) == []
    shipper.rode(riding, None)  # the heartbeat failed: the lines are still buffered
    assert shipper.take_batch() is not None
    riding = shipper.ride([pod.pk])
    shipper.rode(riding, LogAck(acks={pod.pk: 1}))
    assert shipper._streams == {} and console.requests == []


def test_with_exits_riding_a_closed_stream_waits_for_its_heartbeat(env):
    shipper, _, clock, pod = env
    shipper.exits_ride = True
    shipper.append(pod.pk, "bye")
    shipper.close(pod.pk)
    assert not shipper._due(clock())  # the heartbeat that reports the exit carries it
    clock.now += 1.0
    assert shipper._due(clock())  # unless it does not come: then the shipper sends it
