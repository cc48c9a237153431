"""The real agent (`python -m agents.node`) surviving its own crashes and console outages:
ten SIGKILLs in a row while a container runs, a console cut off for longer than a
heartbeat window, and fencing of a worker the console no longer wants on reconnect."""

import contextlib
import signal
import socket
import threading
import time
import uuid
from datetime import timedelta

import docker
import pytest
from django.conf import settings
from django.utils import timezone

from agents.node_monitor import run_node_monitor
from cluster.models import Node, NodeState
from jobs.models import Pod
from policy.statuses import PodStatus
from tests.agents.agentproc import (
    alive,
    pod_status,
    registered,
    stored_lines,
    wait_for,
)
from tests.agents.conftest import TEST_IMAGE, make_job, remove_node_containers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

COUNTING = (
    'i=0; while [ ! -e "{flag}" ]; do i=$((i+1)); echo "line $i"; sleep 0.02; done; '
    'echo "done after $i"'
)


def expected_lines(lines: list[str], preamble: list[str]) -> list[str]:
    """The exact log a counting worker must leave: preamble, line 1…N, 'done after N'."""
    n = int(lines[-1].rsplit(" ", 1)[1])
    return [*preamble, *(f"line {i}" for i in range(1, n + 1)), f"done after {n}"]


def settled_lines(pod: Pod) -> list[str]:
    """The whole stored log of a counting worker: its last line is "done after N" and
    sequence numbers are contiguous, so once that line is stored every earlier one is."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines = stored_lines(pod)
        if lines and lines[-1].startswith("done after"):
            return lines
        time.sleep(0.05)
    pytest.fail(f"the worker's last line was never stored; the log ends {stored_lines(pod)[-3:]}")


def test_ten_sigkills_in_a_row_keep_one_container_and_every_line_once(
    agents, docker_url, researcher, workspace, quota, tmp_path
):
    name = f"k{uuid.uuid4().hex[:8]}"
    extra = ("--docker-url", docker_url, "--docker-gpus", "off")
    client = docker.DockerClient(base_url=docker_url)
    try:
        agent = agents(name, runtime="docker", extra=extra)
        node = registered(name)
        job, (pod,) = make_job(
            owner=researcher,
            workspace=workspace,
            quota=quota,
            nodes=[node],
            image=TEST_IMAGE,
            gpus=0,
            command=COUNTING.format(flag="/checkpoints/stop"),
        )
        wait_for(lambda: pod_status(pod) == PodStatus.RUNNING, "the container to run", 60)
        container_ids = set()
        seen = 0
        for _ in range(10):
            wait_for(lambda s=seen: len(stored_lines(pod)) >= s + 5, "new lines to arrive")
            seen = len(stored_lines(pod))
            (container,) = client.containers.list(
                all=True, filters={"label": f"io.gpu-console.node={name}"}
            )
            assert container.status == "running"
            assert container.attrs["RestartCount"] == 0
            container_ids.add(container.id)
            agent.proc.send_signal(signal.SIGKILL)
            agent.wait()
            agent = agents(name, bootstrap=None, runtime="docker", extra=extra)
        wait_for(lambda: "adopted 1 workers" in agent.output(), "the last adoption")
        area = tmp_path / name / "checkpoints" / f"ws-{workspace.pk}"
        (area / f"job-{job.pk}" / "stop").touch()
        wait_for(lambda: pod_status(pod) == PodStatus.SUCCEEDED, "the worker to finish", 60)
        lines = settled_lines(pod)
        assert lines == expected_lines(lines, []), agent.output()
        assert len(lines) > 50
        assert len(container_ids) == 1
        assert Pod.objects.get(pk=pod.pk).container_id == container_ids.pop()[:64]
        assert agent.terminate() == 0, agent.output()
        assert "Traceback" not in agent.output()
    finally:
        remove_node_containers(docker_url, name)
        client.close()


class Proxy:
    """A TCP forwarder in front of the console that can be cut off and restored."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = 0
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.up()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and cut the open ones. The listener is shut down before
        it is closed: close() alone does not wake a thread blocked in accept(), which would
        still let one more connection through (and a keep-alive client would use it on)."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def test_a_console_outage_longer_than_a_heartbeat_window_loses_no_line(
    agents, live_server, researcher, workspace, quota, tmp_path
):
    proxy = Proxy(int(live_server.url.rsplit(":", 1)[1]))
    agent = agents("outage", url=f"http://127.0.0.1:{proxy.port}")
    node = registered("outage")
    flag = tmp_path / "stop"
    _job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        command=COUNTING.format(flag=flag),
    )
    wait_for(lambda: pod_status(pod) == PodStatus.RUNNING, "the pod to run")
    wait_for(lambda: len(stored_lines(pod)) > 20, "the first lines")

    failures = agent.output().count("log shipping failed")
    heartbeats_failed = agent.output().count("heartbeat failed")
    proxy.down()
    # Once a batch has failed the shipper backs off: nothing sent before the cut is still
    # in flight, so what is stored now is all the console gets until the proxy is back.
    wait_for(lambda: agent.output().count("log shipping failed") > failures, "log shipping to fail")
    stored_before = len(stored_lines(pod))
    wait_for(
        lambda: agent.output().count("heartbeat failed") >= heartbeats_failed + 3,
        "three heartbeats to fail",
    )
    outage = settings.NODE_NOT_READY_AFTER + 1
    # The console sees a silent node: NotReady, its pod Unknown…
    run_node_monitor(now=timezone.now() + timedelta(seconds=outage))
    assert Node.objects.get(pk=node.pk).state == NodeState.NOT_READY
    assert pod_status(pod) == PodStatus.UNKNOWN
    # …while the worker keeps running and its lines wait in the on-disk journal.
    assert len(stored_lines(pod)) == stored_before
    journal = tmp_path / "outage" / "logs" / f"{pod.pk}-1.jsonl"
    assert journal.stat().st_size > 1000
    flag.touch()  # the job finishes during the outage
    wait_for(lambda: "done after" in journal.read_text(), "the last line in the journal")

    proxy.up()
    wait_for(lambda: pod_status(pod) == PodStatus.SUCCEEDED, "the exit to be reported")
    wait_for(lambda: "done after" in "".join(stored_lines(pod)[-1:]), "every buffered line")
    lines = settled_lines(pod)
    preamble = [lines[0]]  # the process runtime's note about the ignored image
    assert lines == expected_lines(lines, preamble)
    assert int(lines[-1].rsplit(" ", 1)[1]) > stored_before + 20  # lines written in the outage
    # Ready again once a heartbeat has been applied (the last step of applying one).
    wait_for(lambda: Node.objects.get(pk=node.pk).state == NodeState.READY, "the node Ready")
    wait_for(lambda: not journal.exists(), "the journal to be dropped once acknowledged")
    assert agent.terminate() == 0, agent.output()
    proxy.down()


def test_a_worker_the_console_no_longer_wants_is_stopped_on_reconnect(
    agents, researcher, workspace, quota, tmp_path
):
    first = agents("fence")
    node = registered("fence")
    pidfile = tmp_path / "worker.pid"
    _job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        command=f'echo $$ > {pidfile}; trap "echo fenced; exit 0" TERM; echo up; '
        "while :; do sleep 0.05; done",
    )
    wait_for(lambda: pod_status(pod) == PodStatus.RUNNING, "the pod to run")
    wait_for(lambda: "up" in stored_lines(pod), "the first line")  # the pid file is written
    worker_pid = int(pidfile.read_text())
    first.proc.send_signal(signal.SIGKILL)
    first.wait()
    # Meanwhile the console gave up on this worker (as after the node was declared lost).
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.LOST, status_reason="node lost")

    second = agents("fence", bootstrap=None)
    wait_for(lambda: not alive(worker_pid), "the stale worker to be stopped")
    wait_for(lambda: "fenced" in stored_lines(pod), "the worker's last line")
    assert "[agent] stopping: sending SIGTERM" in "\n".join(stored_lines(pod))
    pod.refresh_from_db()
    assert (pod.status, pod.status_reason) == (PodStatus.LOST, "node lost")  # report ignored
    assert second.terminate() == 0, second.output()
