"""The agent never retries one poisoned item forever (issue 9, second bullet).

End to end with the real agent and the real console on PostgreSQL: a trigger makes the
database refuse one worker's progress (or one worker's log lines), as a bug tied to one
item's content would. The console refuses that item alone; the agent retries it a few times,
then sets it aside with a marker line in the worker's log and moves on; the node's other
worker finishes with all its lines, and the poisoned worker's exit is still applied.

The old code answered 500 to the whole request and the agent sent it again forever: no
exit, no log line of any worker on the node got through.
"""

import contextlib
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.conf import settings

from agents.node.client import AgentClient, ServerFailed, TransportError
from agents.node.logship import LogShipper
from cluster.models import Node, NodeState
from jobs.models import Pod
from policy.statuses import PodStatus
from protocol import limits
from protocol.agent import LogAck, LogBatch
from tests.agents.agentproc import IMAGE_LINE, pod_status, registered, stored_lines, wait_for
from tests.agents.conftest import make_job

ROOT = settings.BASE_DIR
N = limits.REFUSALS_BEFORE_SET_ASIDE


def _job(owner, workspace, quota, node, command: str) -> Pod:
    """A worker without GPUs, so the node's workers run side by side."""
    _job, (pod,) = make_job(
        owner=owner, workspace=workspace, quota=quota, nodes=[node], command=command, gpus=0
    )
    return pod


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_progress_report_the_console_keeps_failing_on_is_set_aside(
    agents, trigger, researcher, workspace, quota, tmp_path
):
    trigger.refuse("jobs_pod", "NEW.progress_phase = 'poison'", events="UPDATE")
    agent = agents("poison-node")
    node = registered("poison-node")
    flag = tmp_path / "finish"
    script = (
        f"import os, sys, time; sys.path.insert(0, {str(ROOT)!r}); "
        "from agents.sdk import progress; progress(1, 2, phase='poison'); print('reported'); "
        f"[time.sleep(0.1) for _ in iter(lambda: os.path.exists({str(flag)!r}), True)]; "
        "print('finished')"
    )
    poisoned = _job(researcher, workspace, quota, node, f'{sys.executable} -c "{script}"')
    ordinary = _job(
        researcher, workspace, quota, node, 'for i in $(seq 1 200); do echo "line $i"; done'
    )
    marker = f"the console refused this worker's report {N} times"
    wait_for(lambda: any(marker in line for line in stored_lines(poisoned)), "the marker line")
    assert "refused the report of pod" in agent.output()
    pod = Pod.objects.get(pk=poisoned.pk)
    assert pod.report_refused.startswith("report refused: the console could not apply")
    # The node's other worker was never held up.
    wait_for(lambda: pod_status(ordinary) == PodStatus.SUCCEEDED, "the ordinary worker")
    wait_for(lambda: len(stored_lines(ordinary)) == 201, "all its lines")
    assert stored_lines(ordinary) == [IMAGE_LINE, *(f"line {i}" for i in range(1, 201))]
    # The poisoned worker's own exit still counts: only its details were set aside.
    flag.touch()
    wait_for(lambda: pod_status(poisoned) == PodStatus.SUCCEEDED, "the poisoned worker's exit")
    assert Node.objects.get(pk=node.pk).state == NodeState.READY
    assert agent.terminate() == 0, agent.output()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_log_lines_the_console_keeps_refusing_are_set_aside_with_a_marker(
    agents, trigger, researcher, workspace, quota
):
    trigger.refuse("jobs_logchunk", "NEW.text LIKE '%POISON%'", events="INSERT")
    agent = agents("poison-logs")
    node = registered("poison-logs")
    poisoned = _job(
        researcher,
        workspace,
        quota,
        node,
        "echo before; sleep 1.5; echo POISON; sleep 1.5; echo after; sleep 0.5; echo done",
    )
    ordinary = _job(
        researcher,
        workspace,
        quota,
        node,
        'for i in $(seq 1 30); do echo "tick $i"; sleep 0.1; done',
    )
    wait_for(lambda: pod_status(poisoned) == PodStatus.SUCCEEDED, "the poisoned worker")
    wait_for(lambda: "done" in stored_lines(poisoned), "its last line", timeout=60)
    lines = stored_lines(poisoned)
    assert "POISON" not in lines
    (marker,) = [line for line in lines if "log lines set aside" in line]
    assert f"the console refused them {N} times" in marker
    assert lines.index("before") < lines.index(marker) < lines.index("after")
    wait_for(lambda: len(stored_lines(ordinary)) == 31, "every line of the other worker")
    assert stored_lines(ordinary)[1:] == [f"tick {i}" for i in range(1, 31)]
    assert pod_status(ordinary) == PodStatus.SUCCEEDED
    assert agent.terminate() == 0, agent.output()


def test_a_request_the_console_fails_on_is_split_and_only_the_bad_stream_set_aside():
    """The shipper's side of a console that answers 5xx to a whole request (an older
    console, a bug): it sends each worker's lines alone, then sets the failing ones aside."""
    sent: list[LogBatch] = []
    stored: dict[int, list[str]] = {1: [], 2: []}

    def send(batch: LogBatch) -> LogAck:
        sent.append(batch)
        if any("POISON" in line for b in batch.batches for line in b.lines):
            raise ServerFailed("console answered 500")
        acks = {}
        for b in batch.batches:
            stored[b.pod_id][b.first_seq :] = b.lines
            acks[b.pod_id] = b.first_seq + len(b.lines)
        return LogAck(acks=acks)

    shipper = LogShipper(send, flush_after=0)
    for pod_id in (1, 2):
        shipper.open(pod_id, 1, 0)
    shipper.append(1, "a")
    shipper.append(1, "POISON \x00")
    shipper.append(2, "b1")
    shipper.append(2, "b2")
    deadline = time.monotonic() + 10
    while not shipper.drained() and time.monotonic() < deadline:
        with contextlib.suppress(ServerFailed):
            shipper.ship_once()
    assert shipper.drained()
    assert stored[2] == ["b1", "b2"]
    assert stored[1] == [
        f"[agent] 2 log lines set aside: the console refused them {N} times (console answered 500)"
    ]
    # One whole request, then worker 1 alone N times (set aside), worker 2 alone, the marker.
    assert len(sent) <= 2 + N + 1
    assert len(sent[0].batches) == 2


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_proxy_answering_while_the_console_restarts_is_an_outage_not_a_refusal(status):
    """Behind a proxy (Caddy) a restarting console answers 502/503/504 for a while: the
    real client reads that as unreachable, and the shipper keeps every line for later
    instead of counting refusals and setting them aside (found by make test-deploy)."""
    answers = [status] * (N + 3) + [200]
    accepted: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            code = answers.pop(0)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            if code == 200:
                accepted.extend(line for b in body["batches"] for line in b["lines"])
                acks = {str(b["pod_id"]): b["first_seq"] + len(b["lines"]) for b in body["batches"]}
                self.wfile.write(json.dumps({"acks": acks}).encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = AgentClient(f"http://127.0.0.1:{server.server_port}", token="t")
    try:
        shipper = LogShipper(client.send_logs, flush_after=0)
        shipper.open(1, 1, 0)
        shipper.append(1, "kept")
        deadline = time.monotonic() + 10
        while not shipper.drained() and time.monotonic() < deadline:
            with contextlib.suppress(TransportError):
                shipper.ship_once()
        assert shipper.drained() and not answers
        assert accepted == ["kept"]  # the line itself, not a set-aside marker
    finally:
        server.shutdown()
        server.server_close()
        client.close()
