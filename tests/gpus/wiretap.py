"""A pass-through in front of a Docker-API socket that keeps what clients send.

podman's Docker-compatible service creates containers from any device request but neither
applies nor shows it (its inspect has no DeviceRequests), so the exact request the agent
makes is read on the wire: every byte is relayed to the real engine unchanged, and the
client's side is kept to be parsed afterwards.
"""

import contextlib
import json
import socket
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes

    def json(self):
        return json.loads(self.body)


class Wiretap:
    def __init__(self, engine_socket: str, listen: Path) -> None:
        self.engine = engine_socket
        self.path = listen
        self._streams: list[bytearray] = []
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(listen))
        self._server.listen(64)
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.engine)
            sent = bytearray()
            with self._lock:
                self._streams.append(sent)
                self._open += [client, upstream]
            threading.Thread(target=_pipe, args=(client, upstream, sent), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client, None), daemon=True).start()

    def requests(self) -> list[Request]:
        with self._lock:
            streams = [bytes(s) for s in self._streams]
        found = []
        for stream in streams:
            found.extend(_parse(stream))
        return found

    def creates(self) -> list[dict]:
        """The bodies of every container create, in order."""
        return [
            r.json()
            for r in self.requests()
            if r.method == "POST" and "/containers/create" in r.path
        ]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.close()


def _pipe(source: socket.socket, target: socket.socket, keep: bytearray | None) -> None:
    try:
        while data := source.recv(65536):
            if keep is not None:
                keep.extend(data)
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _parse(stream: bytes) -> list[Request]:
    """HTTP/1.1 requests one after another on a connection (Content-Length or chunked)."""
    found = []
    at = 0
    while True:
        end = stream.find(b"\r\n\r\n", at)
        if end < 0:
            return found
        head = stream[at:end].decode("latin-1").split("\r\n")
        method, path, _ = head[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in head[1:])}
        at = end + 4
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                line_end = stream.find(b"\r\n", at)
                size = int(stream[at:line_end].split(b";")[0], 16)
                at = line_end + 2
                body += stream[at : at + size]
                at += size + 2
                if size == 0:
                    break
        else:
            size = int(headers.get("content-length", "0"))
            body = stream[at : at + size]
            at += size
        found.append(Request(method, path, bytes(body)))
