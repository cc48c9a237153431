"""A fast printer loses no line without saying so (issue 24, finding 2).

200,000 lines as fast as possible go over the per-worker rate (agents.node.logstream): the
lines over it are dropped, and a marker line says how many. The lines dropped last, after
which nothing came to make room, used to vanish with no marker, and the stream (its journal
too, on disk) was never done. Now every line is stored or counted by a marker, and the
journal is gone once the worker has ended.
"""

import re

import pytest

from agents.node.logship import LogShipper
from jobs.models import Pod
from policy.statuses import PodStatus
from protocol.agent import LogAck
from tests.agents.agentproc import IMAGE_LINE, pod_status, registered, stored_lines, wait_for
from tests.agents.conftest import make_job

LINES = 200_000
DROPPED = re.compile(r"^\[agent\] (\d+) log lines dropped: ")


def accounting(lines: list[str]) -> tuple[int, int, int]:
    """(lines stored or counted by a marker, lines lost silently, lines stored twice) of a
    log of `seq 1 LINES`: a gap between two numbers must be exactly what the markers
    between them count."""
    accounted = lost = duplicated = 0
    last, counted = 0, 0
    for line in lines:
        if line == IMAGE_LINE:
            continue
        marker = DROPPED.match(line)
        if marker:
            counted += int(marker[1])
            continue
        number = int(line)
        if number <= last:
            duplicated += 1
            continue
        lost += max(0, number - last - 1 - counted)
        accounted += 1 + counted
        last, counted = number, 0
    lost += max(0, LINES - last - counted)
    accounted += counted
    return accounted, lost, duplicated


def test_the_last_dropped_lines_get_their_marker_and_the_stream_ends(tmp_path):
    now = [100.0]
    sent = []

    def send(batch):
        sent.extend(line for b in batch.batches for line in b.lines)
        return LogAck(acks={b.pod_id: b.first_seq + len(b.lines) for b in batch.batches})

    shipper = LogShipper(
        send, rate_lines=10, rate_burst=5, journal_dir=tmp_path, clock=lambda: now[0]
    )
    shipper.open(1, 1, 0)
    for i in range(20):  # all at one instant: 5 go through, 15 are over the rate
        shipper.append(1, f"line {i}")
    while shipper.ship_once():
        pass
    shipper.close(1)  # the worker has exited: nothing more comes to make room
    while shipper.ship_once():
        pass
    assert sent == [
        *(f"line {i}" for i in range(5)),
        "[agent] 15 log lines dropped: over 10 lines/s",
    ]
    assert shipper.drained()
    assert list(tmp_path.iterdir()) == []  # its journal is removed once it is done


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_200000_lines_as_fast_as_possible_are_each_stored_or_counted(
    agents, researcher, workspace, quota, tmp_path, node_figures
):
    agent = agents("fast-node")
    node = registered("fast-node")
    node_figures.fault()
    _job, (pod,) = make_job(
        owner=researcher, workspace=workspace, quota=quota, nodes=[node], command=f"seq 1 {LINES}"
    )
    wait_for(lambda: pod_status(pod) == PodStatus.SUCCEEDED, "the pod to succeed", 120)

    def settled():
        figures = accounting(stored_lines(Pod.objects.get(pk=pod.pk)))
        return figures if figures[0] == LINES else None

    try:
        wait_for(settled, "every line stored or counted by a marker", 60)
    finally:
        _accounted, lost, duplicated = accounting(stored_lines(pod))
        node_figures.lines(lost=lost, duplicated=duplicated)
    assert (lost, duplicated) == (0, 0)
    journals = tmp_path / "fast-node" / "logs"
    wait_for(lambda: not list(journals.iterdir()), "the stream's journal to be removed", 30)
    assert "Traceback" not in agent.output()
    node_figures.survive()
