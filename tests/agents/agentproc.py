"""The real agent (`python -m agents.node`) as a subprocess, for the end-to-end tests."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from agents.actions import issue_bootstrap_token
from cluster.models import Node
from jobs.models import LogChunk, Pod

WAIT = 30.0
AGENT_LOG_TAIL = 150
IMAGE_LINE = (
    "[agent] process runtime: image 'pytorch:2.4' is ignored; the command runs directly on "
    "this host"
)


def wait_for(fn, what: str, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


class AgentProcess:
    def __init__(
        self,
        url: str,
        name: str,
        state_dir: Path,
        bootstrap: str | None,
        runtime: str = "process",
        extra: tuple[str, ...] = (),
    ) -> None:
        self.log_path = state_dir.parent / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT_")}
        if bootstrap:
            env["GPU_AGENT_BOOTSTRAP_TOKEN"] = bootstrap
        command = [
            sys.executable,
            "-m",
            "agents.node",
            "--server",
            url,
            "--name",
            name,
            "--state-dir",
            str(state_dir),
            "--runtime",
            runtime,
            "--fake-gpus",
            "8xH200",
            "--heartbeat-interval",
            "0.2",
            "--shutdown-grace",
            "5",
            *extra,
        ]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            command, cwd=settings.BASE_DIR, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait()

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=WAIT)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()


@pytest.fixture
def agents(live_server, tmp_path):
    started: list[AgentProcess] = []

    def start(
        name: str = "e2e-node",
        bootstrap: str | None = "issue",
        *,
        url: str | None = None,
        runtime: str = "process",
        extra: tuple[str, ...] = (),
    ) -> AgentProcess:
        if bootstrap == "issue":
            _, bootstrap = issue_bootstrap_token(None, f"e2e {name}")
        agent = AgentProcess(
            url or live_server.url, name, tmp_path / name, bootstrap, runtime, extra
        )
        started.append(agent)
        return agent

    yield start
    for agent in started:
        if agent.proc.poll() is None:
            agent.kill()
        elif not agent._log.closed:
            agent._log.close()
        # pytest shows a test's captured teardown output only when it fails: the agent's
        # own account of what it did is then there to read.
        tail = agent.output().splitlines()[-AGENT_LOG_TAIL:]
        print(f"--- agent {agent.log_path.stem}: last {len(tail)} lines ---", *tail, sep="\n")
    # The live server outlives the test: answer the waits the agents left (agents.wake)
    # and stop its watcher before this test's database goes.
    from agents import wake

    if wake._watcher is not None:
        wake._watcher.close()
        wake._watcher = None
    settle(getattr(live_server.thread, "httpd", None))


def settle(httpd, quiet: float = 0.5) -> None:
    """Let the requests the killed agents sent finish before the test's tables are flushed
    (on PostgreSQL a TRUNCATE racing a heartbeat's transaction is a deadlock, and the flush
    fails the test): until no live server thread has run for `quiet` seconds, as a request
    still in the listen backlog gets its thread only after the others ended."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        busy = [t for t in _request_threads(httpd) if t.is_alive()]
        for thread in busy:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if not busy:
            time.sleep(quiet)
            if not any(t.is_alive() for t in _request_threads(httpd)):
                return


def _request_threads(httpd) -> list:
    """The server's request threads (socketserver.ThreadingMixIn keeps them in an instance
    attribute once it served a request; before that the class has a placeholder)."""
    return list(vars(httpd).get("_threads", ())) if httpd is not None else []


def registered(name: str) -> Node:
    return wait_for(
        lambda: Node.objects.filter(name=name, token_prefix__isnull=False).first(),
        f"node {name} to register",
    )


def stored_lines(pod: Pod) -> list[str]:
    chunks = list(LogChunk.objects.filter(pod=pod).order_by("seq_start"))
    expected = 0
    for chunk in chunks:  # contiguous, no overlap: each sequence stored exactly once
        assert chunk.seq_start == expected
        expected = chunk.seq_end + 1
    return "".join(c.text for c in chunks).split("\n")[:-1]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def pod_status(pod: Pod) -> str:
    return Pod.objects.get(pk=pod.pk).status
