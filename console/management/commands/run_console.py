"""`manage.py run_console`: the embedded default on one machine.

Starts the web server, the scheduler and monitor loops in this process (no Redis needed),
and one local agent with the process runtime and fake GPUs as a child process, started
again with back-off when it dies (`console.supervise`). Jobs run as local processes under
this user's account, so the data files are kept private (0600).

Ctrl-C (or SIGTERM) stops placing work, asks the jobs running on the local node to stop the
way a user's Stop does (SIGTERM and the grace period; without fault tolerance they end
Stopped, with it they resume when the console starts again), waits for their workers to
report their end, then stops the agent, the loops and the server.
"""

import contextlib
import getpass
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.core.servers.basehttp import (
    ThreadedWSGIServer,
    WSGIRequestHandler,
    get_internal_wsgi_application,
)
from django.utils import timezone

from console.demo import protect_data_files
from console.supervise import Supervisor
from protocol.agentlock import lock_holder


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def _is_agent_of(pid: int, state_dir: Path) -> bool:
    """Whether `pid` is an agent (`python -m agents.node`) on this state dir."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"agents.node" in argv and str(state_dir).encode() in argv


def needs_registration(state_dir: Path, url: str, name: str) -> bool:
    """Whether the local agent must register (again): never registered, or registered with
    a console at another address (`make run` on another port); it then gets a bootstrap
    token and re-registers as the same node."""
    try:
        saved = json.loads((state_dir / "node.json").read_text())
    except (OSError, ValueError):
        return True
    return not (
        isinstance(saved, dict)
        and saved.get("node_token")
        and saved.get("server") == url
        and saved.get("name") == name
    )


class Command(BaseCommand):
    help = "Run the console, its loops and a local agent with fake GPUs (embedded default)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--addr", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--fake-gpus", default="8xH200")
        parser.add_argument("--node-name", default="local-gpu-0")
        # The fake node looks like a real 8xH200 server (2 sockets, 2 TB) so that jobs sized
        # for one can be placed; the process runtime does not enforce CPU or memory limits.
        parser.add_argument("--node-cpus", type=int, default=112)
        parser.add_argument("--node-memory-gb", type=int, default=2048)
        parser.add_argument("--no-agent", action="store_true", help="do not start a local agent")

    def handle(self, *args, **options) -> None:
        if settings.CONSOLE_LOOPS != "inprocess":
            raise CommandError(
                "run_console runs the loops in-process; unset REDIS_URL/CONSOLE_LOOPS "
                "(production uses gunicorn + celery worker + celery beat instead)"
            )
        from console.loops import start_loops, stop_loops

        url = f"http://{options['addr']}:{options['port']}"
        # Jobs run as this user: what they and the console write is for this user only.
        os.umask(0o077)
        protect_data_files(Path(settings.VAR_DIR))
        httpd = ThreadedWSGIServer((options["addr"], options["port"]), WSGIRequestHandler)
        httpd.daemon_threads = True
        httpd.set_app(get_internal_wsgi_application())
        server = threading.Thread(target=httpd.serve_forever, name="web", daemon=True)
        server.start()
        start_loops()
        agent = None if options["no_agent"] else self._start_agent(url, options)
        # SIGTERM behaves like Ctrl-C so `kill` and process managers stop us cleanly; SIGINT
        # is handled explicitly too, because a shell that starts us in the background
        # leaves it ignored and Python then never raises KeyboardInterrupt.
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)
        self.stdout.write(self.style.SUCCESS(f"Console running at {url}/  (Ctrl-C to stop)"))
        if agent is not None:
            self.stdout.write(
                f"Embedded mode: jobs run as local processes under your account "
                f"({_user()}), with access to what you can access; the data in "
                f"{settings.VAR_DIR} is readable by you only (0600). For a shared cluster use "
                "the docker runtime (README: Production)."
            )
        self.stdout.flush()
        try:
            while server.is_alive():
                server.join(1)
        except KeyboardInterrupt:
            pass
        finally:
            self.stdout.write("Stopping…")
            # No new placements on a node that is going away; the web server keeps serving
            # while the agent stops its workers, so their final statuses and last log lines
            # still reach the console.
            stop_loops(["scheduler"])
            if agent is not None:
                self._stop_local_jobs(options["node_name"])
                self._stop_agent(agent.stop())
            stop_loops()
            httpd.shutdown()
            httpd.server_close()
            self.stdout.write("Stopped.")

    def _start_agent(self, url: str, options) -> Supervisor:
        from agents.actions import allow_reregistration, issue_bootstrap_token
        from cluster.models import Node

        state_dir = Path(settings.VAR_DIR) / "agent" / options["node_name"]
        state_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if needs_registration(state_dir, url, options["node_name"]):
            # The embedded console's operator is also its node's operator: starting it on
            # another address is the deliberate re-registration a taken name requires
            # (recorded under Registrations like any other consent).
            allow_reregistration(
                Node.objects.filter(name=options["node_name"]), None, timezone.now()
            )
            _, plain = issue_bootstrap_token(None, f"embedded agent {options['node_name']}")
            env["GPU_AGENT_BOOTSTRAP_TOKEN"] = plain
        command = [
            sys.executable,
            "-m",
            "agents.node",
            "--server",
            url,
            "--name",
            options["node_name"],
            "--state-dir",
            str(state_dir),
            "--runtime",
            "process",
            "--fake-gpus",
            options["fake_gpus"],
            "--cpus",
            str(options["node_cpus"]),
            "--memory-gb",
            str(options["node_memory_gb"]),
            # Workers still running when the agent stops get what a user's Stop gives them.
            "--shutdown-grace",
            str(max(settings.DEFAULT_STOP_GRACE, 1)),
            # It dies with this console, however this console ends (kill -9 included).
            "--parent-pid",
            str(os.getpid()),
        ]

        def start() -> subprocess.Popen:
            self._replace_leftover_agent(state_dir)
            # Its own process group, so Ctrl-C in the terminal reaches us first and we stop
            # it in order (workers get their SIGTERM and grace) instead of all at once.
            return subprocess.Popen(command, env=env, start_new_session=True)

        def report(line: str) -> None:
            self.stderr.write(line)
            self.stderr.flush()

        # Started again when it dies (killed, crashed), with back-off (docs/processes.md).
        return Supervisor(start, report=report)

    def _replace_leftover_agent(self, state_dir: Path) -> None:
        """An agent a previous console left on this state dir (one killed before agents
        watched their console) is stopped like ours at a clean stop, then killed if it
        lingers: else the new agent would find the state dir locked and exit."""
        pid = lock_holder(state_dir)
        if not pid or not _is_agent_of(pid, state_dir):
            return
        self.stdout.write(f"Stopping the local agent a previous console left running ({pid})…")
        self.stdout.flush()
        deadline = time.monotonic() + settings.DEFAULT_STOP_GRACE + 20
        sig = signal.SIGTERM
        while lock_holder(state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if time.monotonic() >= deadline:
                sig = signal.SIGKILL
            time.sleep(0.2)

    def _stop_local_jobs(self, node_name: str) -> None:
        """Stop the local node's jobs like a user's Stop, and wait until their workers have
        reported their end (the web server and the agent are still up for that)."""
        from cluster.models import Node
        from jobs.actions.stop import live_workers_on, stop_for_shutdown

        node = Node.objects.filter(name=node_name).first()
        if node is None:
            return
        stopped = stop_for_shutdown(node.pk)
        if not stopped:
            return
        self.stdout.write(
            f"Stopping {len(stopped)} running job(s) (grace {settings.DEFAULT_STOP_GRACE}s)…"
        )
        self.stdout.flush()
        deadline = (
            time.monotonic()
            + settings.DEFAULT_STOP_GRACE
            + (4 * settings.AGENT_HEARTBEAT_INTERVAL + 10)
        )
        while live_workers_on(node.pk) and time.monotonic() < deadline:
            time.sleep(0.2)

    def _stop_agent(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=settings.DEFAULT_STOP_GRACE + 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
