"""The exec channel of an MPI job (agents.node.mpi_exec, docs/distributed.md "MPI jobs"),
as real processes on two addresses of this host with one port, as two nodes' workers run
it: the launcher's `rsh` runs a command on the other node's server and gets its output and
exit code, the launcher's end ends every server and follower with its exit code, a wrong
token is refused, and a command whose caller went away is killed. (Open MPI itself drives
it in `make test-distributed`.)"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.node import mpi_exec

SCRIPT = Path(mpi_exec.__file__).resolve()
A, B = "127.0.0.2", "127.0.0.3"
TOKEN = "s3cret-token"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((A, 0))
        return sock.getsockname()[1]


def _worker(role: str, address: str, port: int, tmp: Path, **env) -> subprocess.Popen:
    full = {
        **os.environ,
        "MPI_EXEC_ROLE": role,
        "MPI_EXEC_ADDR": address,
        "MPI_EXEC_PORT": str(port),
        "MPI_EXEC_SERVERS": B,
        "MPI_EXEC_TOKEN": TOKEN,
        **env,
    }
    with (tmp / f"{role}-{address}.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), role], env=full, stdout=log, stderr=subprocess.STDOUT
        )


def _listening(address: str, port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex((address, port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {address}:{port}")


@pytest.fixture
def node_b(tmp_path):
    port = _free_port()
    server = _worker("serve", B, port, tmp_path)
    follower = _worker("follow", B, port, tmp_path)
    _listening(B, port)
    waiting = tmp_path / f"serve-{B}.log"
    deadline = time.monotonic() + 30
    while "waits with this server" not in waiting.read_text():
        assert time.monotonic() < deadline, "the follower never reached its server"
        time.sleep(0.1)
    yield port, server, follower
    for process in (server, follower):
        process.kill()
        process.wait()


def test_the_launcher_runs_a_command_on_the_other_node_and_ends_every_worker(tmp_path, node_b):
    port, server, follower = node_b
    # What mpirun does: "<rsh agent> HOST words…"; the words go through the remote shell.
    command = (
        '$OMPI_MCA_plm_rsh_agent 127.0.0.3 "echo ran-on=\\$MPI_EXEC_ADDR; exit 5"; '
        'echo "rsh exit $?"; echo "no tree spawn: $OMPI_MCA_plm_rsh_no_tree_spawn"; exit 4'
    )
    launcher = _worker("launcher", A, port, tmp_path, MPI_EXEC_COMMAND=command)
    assert launcher.wait(timeout=60) == 4
    out = (tmp_path / f"launcher-{A}.log").read_text()
    assert "ran-on=127.0.0.3\nrsh exit 5\nno tree spawn: 1\n" in out, out
    # The launcher's end is every worker's: the server and the follower exit with its code.
    assert server.wait(timeout=60) == 4
    assert follower.wait(timeout=60) == 4
    assert "serving 127.0.0.3" in (tmp_path / f"serve-{B}.log").read_text()


def test_a_follower_that_finds_its_server_gone_ends_without_deciding_anything(tmp_path):
    port = _free_port()  # nothing listens there: the run ended before this worker started
    follower = _worker("follow", B, port, tmp_path, MPI_EXEC_CONNECT_TIMEOUT="2")
    assert follower.wait(timeout=60) == 0
    assert "is gone" in (tmp_path / f"follow-{B}.log").read_text()


def test_a_wrong_token_runs_nothing(tmp_path, node_b):
    port, server, _ = node_b
    marker = tmp_path / "ran"
    env = {**os.environ, "MPI_EXEC_PORT": str(port), "MPI_EXEC_TOKEN": "guessed"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "rsh", B, f"touch {marker}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == mpi_exec.FAILED
    assert "channel broke" in result.stderr
    assert not marker.exists() and server.poll() is None  # and the server serves on
    assert "refused a request" in (tmp_path / f"serve-{B}.log").read_text()


def test_a_command_whose_caller_went_away_is_killed(tmp_path, node_b):
    port, _, _ = node_b
    pid_file = tmp_path / "pid"
    env = {**os.environ, "MPI_EXEC_PORT": str(port), "MPI_EXEC_TOKEN": TOKEN}
    caller = subprocess.Popen(
        [sys.executable, str(SCRIPT), "rsh", B, f"echo $$ > {pid_file}; exec sleep 300"],
        env=env,
    )
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline, "the remote command did not start"
        time.sleep(0.1)
    remote = int(pid_file.read_text())
    caller.kill()  # mpirun aborted: the daemon it started over there must not stay
    caller.wait()
    deadline = time.monotonic() + 30
    while _alive(remote):
        assert time.monotonic() < deadline, f"pid {remote} outlived its caller"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0]
    except (OSError, IndexError):
        return False
    return status != "Z"


def test_a_worker_outside_an_mpi_job_says_what_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPI_EXEC_")}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "serve"], env=env, capture_output=True, text=True
    )
    assert result.returncode == mpi_exec.FAILED
    assert "MPI_EXEC_PORT is not set" in result.stderr


def test_a_taken_port_fails_the_worker_saying_so(tmp_path, node_b):
    port, _, _ = node_b
    second = _worker("serve", B, port, tmp_path / "..")
    assert second.wait(timeout=30) == mpi_exec.FAILED
    assert f"cannot listen on {B}:{port}" in (tmp_path / f"../serve-{B}.log").read_text()


def test_the_agent_runs_the_channel_with_its_python_or_the_images(tmp_path):
    from agents.node import mpi_launch
    from agents.node.fence import MOUNT

    assert mpi_launch.wrapped("serve", "process") == f"exec {sys.executable} {SCRIPT} serve"
    assert mpi_launch.wrapped("launcher", "docker") == (
        f"exec python3 {MOUNT}/mpi_exec.py launcher"
    )
    copy = mpi_launch.install(tmp_path)  # the fence folder, mounted into containers
    assert copy.read_bytes() == SCRIPT.read_bytes() and copy.stat().st_mode & 0o777 == 0o644
    copy.write_text("stale")
    assert mpi_launch.install(tmp_path).read_bytes() == SCRIPT.read_bytes()


def test_each_node_starts_open_mpi_in_a_folder_of_its_own_removed_at_the_end(tmp_path):
    """Open MPI's session directory is named by host name: two nodes' workers on one host
    shared it and lost each other's daemons (mpirun waited for ever), so what each channel
    starts gets a TMPDIR of its own inside the worker's, removed when the channel ends."""
    port = _free_port()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    server = _worker("serve", B, port, tmp_path, TMPDIR=str(tmp))
    _listening(B, port)
    command = (
        '$OMPI_MCA_plm_rsh_agent 127.0.0.3 "echo remote=\\$TMPDIR; test -d \\$TMPDIR"; '
        'echo "rsh exit $?"; echo "local=$TMPDIR"'
    )
    launcher = _worker("launcher", A, port, tmp_path, MPI_EXEC_COMMAND=command, TMPDIR=str(tmp))
    assert launcher.wait(timeout=60) == 0
    assert server.wait(timeout=60) == 0
    out = (tmp_path / f"launcher-{A}.log").read_text()
    assert "rsh exit 0" in out, out
    folders = {line.split("=", 1)[0]: line.split("=", 1)[1] for line in out.splitlines()[:3:2]}
    assert set(folders) == {"remote", "local"}, out
    assert folders["remote"] != folders["local"]
    assert all(Path(f).parent == tmp for f in folders.values()), folders
    assert list(tmp.iterdir()) == []  # both removed


def test_a_stopped_server_ends_at_once_by_the_signal(tmp_path):
    """A worker stopped by the agent (SIGTERM) ends at once, by the signal, whichever of its
    threads takes it: the channel installs no handler (a Python handler runs only in the
    main thread, which waits on a lock a signal taken elsewhere does not wake)."""
    port = _free_port()
    server = _worker("serve", B, port, tmp_path)
    try:
        _listening(B, port)
        server.terminate()
        assert server.wait(timeout=10) == -15
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
