"""MPI without ssh (docs/distributed.md, "MPI jobs"): the channel mpirun uses to start its
daemons on the other workers' nodes, in place of ssh.

An MPI job's rank 0 (the launcher) runs the job's command, which calls `mpirun`; Open MPI
starts one daemon (`orted`) per remote node through its "rsh agent". Kubeflow's MPIJob runs
sshd in every worker for that; here every worker runs this file instead, which needs nothing
but a Python 3 (the standard library) and the job's own token:

- `launcher` (rank 0): serves its node (below), runs the job's command (MPI_EXEC_COMMAND)
  with `OMPI_MCA_plm_rsh_agent` naming this file's `rsh` (and no tree spawn), then tells
  every other node's server that the run is over, and exits with the command's exit code;
- `serve` (the first worker on another node): answers `exec` requests (runs the command it
  is given with `/bin/sh -c`, inside this worker, so within its fence, its resources and its
  data mounts; output and exit code go back), until the launcher says `done`; exits with
  the launcher's code;
- `follow` (any other worker on a node that has one already, rank 0's included): waits
  for its node's server (at MPI_EXEC_ADDR) to be done and exits with the same code (0 when
  that server is already gone: a follower's exit decides nothing);
- `rsh HOST WORDS…`: what mpirun calls; runs WORDS on HOST's server as ssh would (joined by
  spaces, through a shell), passes on its output and exits with its exit code.

Every node's server listens on MPI_EXEC_PORT at its own address (MPI_EXEC_ADDR; any address
when that one is not local). A request is one JSON line with the job attempt's token
(MPI_EXEC_TOKEN); answers to `exec` are frames (a kind byte, a 4-byte length, the payload):
`o` output bytes, `x` the exit code as JSON. A closed connection kills the command started
for it. Standard library only: the agents copy this file next to the fence wrapper, so a
container's own python3 runs it too.
"""

import contextlib
import errno
import hmac
import json
import os
import shlex
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time

# A node's worker may start a little after the launcher (seconds; the tests shorten it).
CONNECT_TIMEOUT = float(os.environ.get("MPI_EXEC_CONNECT_TIMEOUT") or 120)
DONE_GRACE = 30.0  # commands still running when the launcher is done get this long
HEADER_LIMIT = 1 << 20
HEADER_TIMEOUT = 30.0
CHUNK = 65536
FAILED = 1  # this channel itself failed (bad request, unreachable server)


def _env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        sys.stderr.write(f"[mpi-exec] {name} is not set: is this an MPI job's worker?\n")
        sys.exit(FAILED)
    return value


def _frame(kind: bytes, payload: bytes) -> bytes:
    return kind + struct.pack(">I", len(payload)) + payload


def _read_exact(stream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


class Server(socketserver.ThreadingTCPServer):
    # `server_close` joins the handlers, so every follower hears the code before we exit.
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], token: str) -> None:
        super().__init__(address, Handler)
        self.token = token
        self.done = threading.Event()
        self.code = 0
        self.running: set[subprocess.Popen] = set()
        self.lock = threading.Lock()

    def finish(self, code: int) -> None:
        self.code = code
        self.done.set()

    def drain(self) -> None:
        """Let commands still running end (their daemons exit once mpirun is gone), then
        end them."""
        deadline = time.monotonic() + DONE_GRACE
        while time.monotonic() < deadline:
            with self.lock:
                if not any(p.poll() is None for p in self.running):
                    return
            time.sleep(0.2)
        with self.lock:
            for process in self.running:
                _kill(process)


def _kill(process: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)


class Handler(socketserver.StreamRequestHandler):
    server: Server

    timeout = HEADER_TIMEOUT  # for the request line only; then none

    def handle(self) -> None:
        try:
            request = json.loads(self.rfile.readline(HEADER_LIMIT))
            token = str(request.get("token", ""))
            self.connection.settimeout(None)
        except (OSError, ValueError, AttributeError):
            return
        if not hmac.compare_digest(token.encode(), self.server.token.encode()):
            sys.stderr.write(f"[mpi-exec] refused a request from {self.client_address[0]}\n")
            return
        op = request.get("op")
        if op == "exec":
            self._exec(str(request.get("command", "")))
        elif op == "done":
            self.server.finish(int(request.get("code", 0)))
            self.wfile.write(b"{}\n")
        elif op == "wait":
            print("[mpi-exec] a worker of this node waits with this server", flush=True)
            self.server.done.wait()
            self.wfile.write(json.dumps({"code": self.server.code}).encode() + b"\n")

    def _exec(self, command: str) -> None:
        process = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # killed as a whole when the caller goes away
        )
        with self.server.lock:
            self.server.running.add(process)
        # The caller sends nothing more: its connection closing means mpirun went away,
        # and so must what it started here, output or not.
        threading.Thread(target=self._watch, args=(process,), daemon=True).start()
        try:
            while chunk := process.stdout.read1(CHUNK):
                self.wfile.write(_frame(b"o", chunk))
            code = process.wait()
            self.wfile.write(_frame(b"x", json.dumps({"code": code}).encode()))
        except OSError:  # mpirun went away: so does what it started here
            _kill(process)
            process.wait()
        finally:
            with self.server.lock:
                self.server.running.discard(process)

    def _watch(self, process: subprocess.Popen) -> None:
        with contextlib.suppress(OSError):
            while self.connection.recv(CHUNK):
                pass
        if process.poll() is None:
            _kill(process)


def _listen(port: int, token: str) -> Server:
    """This node's server, at the node's own address when it is one of this host's (two
    agents of one host may use the same port), else at every address."""
    address = os.environ.get("MPI_EXEC_ADDR", "")
    try:
        try:
            return Server((address, port), token)
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                raise
            return Server(("", port), token)
    except OSError as exc:
        sys.stderr.write(f"[mpi-exec] cannot listen on {address or '*'}:{port}: {exc}\n")
        sys.exit(FAILED)


def _connect(host: str, port: int, timeout: float = CONNECT_TIMEOUT) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((host, port), timeout=10)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _request(host: str, port: int, request: dict, timeout: float = CONNECT_TIMEOUT):
    sock = _connect(host, port, timeout)
    sock.settimeout(None)
    sock.sendall(json.dumps(request).encode() + b"\n")
    return sock


def rsh(host: str, words: list[str]) -> int:
    port, token = int(_env("MPI_EXEC_PORT")), _env("MPI_EXEC_TOKEN")
    try:
        sock = _request(host, port, {"token": token, "op": "exec", "command": " ".join(words)})
    except OSError as exc:
        sys.stderr.write(f"[mpi-exec] cannot reach {host}:{port}: {exc}\n")
        return FAILED
    stream = sock.makefile("rb")
    out = sys.stdout.buffer
    try:
        while True:
            kind, size = struct.unpack(">cI", _read_exact(stream, 5))
            payload = _read_exact(stream, size)
            if kind == b"o":
                out.write(payload)
                out.flush()
            elif kind == b"x":
                return int(json.loads(payload)["code"])
    except (ConnectionError, ValueError, KeyError) as exc:
        sys.stderr.write(f"[mpi-exec] {host}: the command's channel broke: {exc}\n")
        return FAILED


def _close(server: Server) -> None:
    server.drain()
    server.shutdown()
    server.server_close()


@contextlib.contextmanager
def _own_tmpdir():
    """Open MPI keeps its session directory under TMPDIR, named by host name and job. Two
    workers of one job on one host (two agents of one machine) would share it, and their
    daemons then lose each other: mpirun reported a daemon lost, or waited for one for
    ever. So what a channel starts (mpirun, orted, the ranks) gets a TMPDIR of its own,
    inside the worker's, removed when the channel ends. A worker stopped by a signal leaves
    it (empty, or with what Open MPI leaves then): no SIGTERM handler, which Python runs
    only in the main thread, and a signal taken by a serving thread would not wake it (the
    stop would wait for its SIGKILL)."""
    previous = os.environ.get("TMPDIR")
    try:
        path = tempfile.mkdtemp(prefix="mpi-exec-")
    except OSError as exc:  # no writable temporary folder: Open MPI's own default then
        sys.stderr.write(f"[mpi-exec] no folder of its own for Open MPI ({exc})\n")
        yield None
        return
    os.environ["TMPDIR"] = path
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous
        shutil.rmtree(path, ignore_errors=True)


def serve() -> int:
    server = _listen(int(_env("MPI_EXEC_PORT")), _env("MPI_EXEC_TOKEN"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"[mpi-exec] serving {os.environ.get('MPI_EXEC_ADDR', '')}: waiting for mpirun")
    sys.stdout.flush()
    server.done.wait()
    _close(server)
    return server.code


def follow() -> int:
    """A follower does no work, so its exit decides nothing: the launcher's and the
    servers' do. A server already gone when it asks (this worker started after the run
    ended, or the server failed and fails the job itself) ends it with 0."""
    host, port = _env("MPI_EXEC_ADDR"), int(_env("MPI_EXEC_PORT"))
    try:
        sock = _request(host, port, {"token": _env("MPI_EXEC_TOKEN"), "op": "wait"})
        answer = sock.makefile("rb").readline()
        return int(json.loads(answer)["code"])
    except (OSError, ValueError, KeyError) as exc:
        sys.stderr.write(f"[mpi-exec] this node's server {host}:{port} is gone ({exc}): done\n")
        return 0


def _tell_done(code: int) -> None:
    port, token = int(_env("MPI_EXEC_PORT")), _env("MPI_EXEC_TOKEN")
    for host in filter(None, os.environ.get("MPI_EXEC_SERVERS", "").split(",")):
        try:  # a server already gone needs no telling
            sock = _request(host, port, {"token": token, "op": "done", "code": code}, 5)
            with sock:
                sock.settimeout(10)
                sock.recv(16)
        except OSError:
            continue


def launch() -> int:
    server = _listen(int(_env("MPI_EXEC_PORT")), _env("MPI_EXEC_TOKEN"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    agent = f"{shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(__file__))} rsh"
    # Every daemon started from here (a tree spawn would need this file on every node's
    # daemon, which the channel does not promise).
    env = {**os.environ, "OMPI_MCA_plm_rsh_agent": agent, "OMPI_MCA_plm_rsh_no_tree_spawn": "1"}
    process = subprocess.Popen(["/bin/sh", "-c", _env("MPI_EXEC_COMMAND")], env=env)
    code = process.wait()
    code = code if code >= 0 else 128 - code  # killed by a signal: as a shell says it
    server.finish(code)
    _tell_done(code)
    _close(server)
    return code


def main(argv: list[str]) -> int:
    role = argv[1] if len(argv) > 1 else os.environ.get("MPI_EXEC_ROLE", "")
    if role == "rsh" and len(argv) >= 4:
        return rsh(argv[2], argv[3:])
    roles = {"launcher": launch, "serve": serve, "follow": follow}
    if role not in roles:
        sys.stderr.write(f"[mpi-exec] unknown role {role!r}\n")
        return FAILED
    if role == "follow":  # starts nothing
        return follow()
    with _own_tmpdir():  # before serving: mpirun may ask at once
        return roles[role]()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
