"""Reading a worker's log through `pods/log` (follow, timestamps), docs/kubernetes.md.

One thread per Pod reads the stream and puts numbered batches on the controller's queue
(no database here). Every reading of a log starts at its first line, so line *i* of a
reading is sequence number *i*: after a reconnect (a dropped stream, a restarted
controller) the lines already sent are skipped here, and the console stores each sequence
number once whatever is sent twice (`kube.actions.store_lines`, the agent's rule). A
reading that ends once the Pod has finished is the whole log: then `done` is sent, after
every line, and only then does the controller record the worker's end and let the Pod go
(its finalizer).
"""

import logging
import queue
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

import requests

from kube.client import KubeClient, KubeError
from protocol import limits

log = logging.getLogger(__name__)

RECONNECT_PAUSE = 0.5
_STAMP = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) ")


@dataclass(frozen=True)
class Lines:
    name: str
    first_seq: int
    lines: list[str]


@dataclass(frozen=True)
class Done:
    name: str


def strip_stamp(raw: bytes) -> str:
    """The line without the kubelet's timestamp, as text (bad bytes replaced)."""
    match = _STAMP.match(raw)
    body = raw[match.end() :] if match else raw
    return body.decode("utf-8", errors="replace").rstrip("\r")


class LogFollower(threading.Thread):
    def __init__(
        self,
        client: KubeClient,
        name: str,
        out: queue.Queue,
        finished: Callable[[], bool],
    ) -> None:
        super().__init__(name=f"kube-log-{name}", daemon=True)
        self.client, self.pod, self.out, self.finished = client, name, out, finished
        self.sent = 0  # lines put on the queue so far
        self.done = False
        self.stopping = threading.Event()

    def _emit(self, index: int, lines: list[str]) -> None:
        fresh = lines[max(self.sent - index, 0) :]
        if fresh:
            self.out.put(Lines(self.pod, index + len(lines) - len(fresh), fresh))
            self.sent = index + len(lines)

    def _read_once(self) -> bool:
        """One reading of the log; True when it was the whole, final log: it began after
        the Pod had finished (one that finished during the reading is read once more)."""
        was_finished = self.finished()
        response = self.client.log_stream(self.pod, follow=True)
        index, partial = 0, b""
        try:
            for chunk in response.iter_content(chunk_size=None):
                if self.stopping.is_set():
                    return False
                parts = (partial + chunk).split(b"\n")
                partial = parts.pop()
                for start in range(0, len(parts), limits.LINES_PER_BATCH):
                    batch = [strip_stamp(p) for p in parts[start : start + limits.LINES_PER_BATCH]]
                    self._emit(index, batch)
                    index += len(batch)
        finally:
            response.close()
        if not was_finished:
            return False
        if partial:
            self._emit(index, [strip_stamp(partial)])
        return True

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                if self._read_once():
                    self.done = True
                    self.out.put(Done(self.pod))
                    return
            except requests.exceptions.ChunkedEncodingError:
                # The API server often ends a proxied log without the last chunk when the
                # kubelet closes it: not known to be whole, so it is read once more.
                log.info("the log stream of %s ended early; reading again", self.pod)
            except KubeError as exc:
                if exc.status == 404:
                    return  # the Pod is gone: the controller decides what that means
                log.debug("log of %s not readable yet: %s", self.pod, exc)
            except Exception as exc:
                log.warning("reading the log of %s failed (%s); reconnecting", self.pod, exc)
            self.stopping.wait(RECONNECT_PAUSE)

    def stop(self) -> None:
        self.stopping.set()
