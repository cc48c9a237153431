"""Log shipping: per-worker sequence numbers, batches, resend until acknowledged (DESIGN §7).

Every line gets the next sequence number of its worker, starting at the console's
`log_next_seq` for that pod. Unacknowledged lines stay buffered and are re-sent from the
first unacknowledged one; the console stores each sequence once, so re-sending is safe.
A batch goes out when a worker has MAX_LINES pending lines or its oldest pending line is
FLUSH_AFTER seconds old (or at once when the worker has exited).

The buffer is bounded per worker. When it is full, new lines are counted and dropped, and a
marker line saying how many were lost takes their place once there is room: sequence numbers
stay contiguous, so the console never waits for a gap. (Spilling to disk comes later.)
"""

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from agents.protocol import MAX_LINES_PER_BATCH, LogAck, LogBatch, LogLines

log = logging.getLogger(__name__)

MAX_LINES = MAX_LINES_PER_BATCH
FLUSH_AFTER = 1.0
MAX_REQUEST_BYTES = 1024 * 1024  # well under the console's 2.5 MB request limit
MAX_BUFFERED_BYTES = 64 * 1024 * 1024  # per worker


def _json_size(line: str) -> int:
    return len(json.dumps(line, ensure_ascii=False).encode()) + 1


@dataclass
class _Stream:
    pod_id: int
    attempt: int
    base: int  # sequence number of lines[0]
    limit: int  # buffered bytes
    lines: deque = field(default_factory=deque)  # (text, json size)
    size: int = 0
    dropped: int = 0
    pending_since: float | None = None  # when the oldest unacknowledged line arrived
    closed: bool = False

    @property
    def next_seq(self) -> int:
        return self.base + len(self.lines)

    def add(self, line: str, now: float) -> None:
        self._settle(now)
        if self.dropped or self.size >= self.limit:
            self.dropped += 1
            return
        self._push(line, now)

    def _settle(self, now: float) -> None:
        """Once there is room again, one line stands for everything dropped meanwhile."""
        if self.dropped and self.size < self.limit // 2:
            self._push(f"[agent] {self.dropped} log lines dropped: buffer full", now)
            self.dropped = 0

    def _push(self, line: str, now: float) -> None:
        item = (line, _json_size(line))
        self.lines.append(item)
        self.size += item[1]
        if self.pending_since is None:
            self.pending_since = now

    def ack(self, next_seq: int, now: float) -> None:
        if next_seq < self.base:
            # The console lacks lines we no longer hold (it lost data): renumber what we
            # have so it continues without a gap, and say so in the log itself.
            self.base = next_seq
            item = ("[agent] earlier log lines were lost", 40)
            self.lines.appendleft(item)
            self.size += item[1]
            return
        while self.lines and self.base < next_seq:
            self.size -= self.lines.popleft()[1]
            self.base += 1
        if self.base < next_seq:  # the console already has more than we sent
            self.base = next_seq
        self.pending_since = now if self.lines else None
        self._settle(now)

    @property
    def drained(self) -> bool:
        return not self.lines and not self.dropped


class LogShipper:
    """Thread-safe: runtime threads append, one shipping thread sends."""

    def __init__(
        self,
        send: Callable[[LogBatch], LogAck],
        *,
        max_lines: int = MAX_LINES,
        flush_after: float = FLUSH_AFTER,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_buffered_bytes: int = MAX_BUFFERED_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self.max_lines = max_lines
        self.flush_after = flush_after
        self.max_request_bytes = max_request_bytes
        self.max_buffered_bytes = max_buffered_bytes
        self._clock = clock
        self._streams: dict[int, _Stream] = {}
        self._cond = threading.Condition()

    # --- producers ---

    def open(self, pod_id: int, attempt: int, next_seq: int) -> None:
        with self._cond:
            if pod_id not in self._streams:
                self._streams[pod_id] = _Stream(
                    pod_id, attempt, base=next_seq, limit=self.max_buffered_bytes
                )

    def append(self, pod_id: int, line: str) -> None:
        with self._cond:
            stream = self._streams.get(pod_id)
            if stream is None:
                return  # rejected by the console, or never opened: nowhere to send it
            stream.add(line, self._clock())
            if len(stream.lines) >= self.max_lines:
                self._cond.notify_all()

    def close(self, pod_id: int) -> None:
        """The worker has exited: ship what is left now, forget the stream once acked."""
        with self._cond:
            stream = self._streams.get(pod_id)
            if stream is not None:
                stream.closed = True
                self._drop_if_done(stream)
                self._cond.notify_all()

    # --- shipping ---

    def _drop_if_done(self, stream: _Stream) -> None:
        if stream.closed and stream.drained:
            self._streams.pop(stream.pod_id, None)

    def _due(self, now: float) -> bool:
        for s in self._streams.values():
            if not s.lines:
                continue
            if s.closed or len(s.lines) >= self.max_lines:
                return True
            if s.pending_since is not None and now - s.pending_since >= self.flush_after:
                return True
        return False

    def take_batch(self) -> LogBatch | None:
        """Every stream's unacknowledged lines, oldest first, within the request limits."""
        with self._cond:
            budget = self.max_request_bytes
            batches = []
            for s in self._streams.values():
                lines = []
                for text, size in s.lines:
                    if len(lines) >= self.max_lines or (size > budget and (lines or batches)):
                        break
                    lines.append(text)
                    budget -= size
                if lines:
                    batches.append(
                        LogLines(pod_id=s.pod_id, attempt=s.attempt, first_seq=s.base, lines=lines)
                    )
                if budget <= 0 or len(batches) >= 256:
                    break
            return LogBatch(batches=batches) if batches else None

    def apply_ack(self, ack: LogAck) -> None:
        now = self._clock()
        with self._cond:
            for pod_id, next_seq in ack.acks.items():
                stream = self._streams.get(pod_id)
                if stream is not None:
                    stream.ack(next_seq, now)
                    self._drop_if_done(stream)
            for pod_id, reason in ack.rejected.items():
                if self._streams.pop(pod_id, None) is not None:
                    log.warning("console refuses logs of pod %s: %s; dropping them", pod_id, reason)
            self._cond.notify_all()

    def ship_once(self) -> bool:
        """Send one batch if there is anything unacknowledged. Raises what `send` raises."""
        batch = self.take_batch()
        if batch is None:
            return False
        self.apply_ack(self._send(batch))
        return True

    def run(self, stop: threading.Event, *, retry_cap: float = 30.0) -> None:
        """The shipping thread: send when due, back off while the console is unreachable."""
        delay = 0.5
        while not stop.is_set():
            with self._cond:
                if not self._due(self._clock()):
                    self._cond.wait(min(self.flush_after, 0.25))
                    continue
            try:
                self.ship_once()
                delay = 0.5
            except Exception as exc:  # transport errors: keep the lines, retry later
                log.warning("log shipping failed (%s); retrying in %.1fs", exc, delay)
                stop.wait(delay)
                delay = min(delay * 2, retry_cap)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # --- queries ---

    def drained(self, pod_ids: Iterable[int] | None = None) -> bool:
        with self._cond:
            ids = self._streams.keys() if pod_ids is None else pod_ids
            return all(self._streams.get(p) is None or self._streams[p].drained for p in list(ids))

    def wait_drained(self, pod_ids: Iterable[int] | None, timeout: float) -> bool:
        """Wait until these workers' lines are all acknowledged (used before reporting an
        exit, so the console has a worker's last lines when it sees it finish)."""
        ids = None if pod_ids is None else list(pod_ids)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                streams = (
                    self._streams.values()
                    if ids is None
                    else [self._streams[p] for p in ids if p in self._streams]
                )
                if all(s.drained for s in streams):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)

    def flush(self, timeout: float) -> bool:
        """Send everything now (on shutdown), from the calling thread."""
        deadline = time.monotonic() + timeout
        while not self.drained():
            if time.monotonic() >= deadline:
                return False
            try:
                if not self.ship_once():
                    return True
            except Exception as exc:
                log.warning("log flush failed: %s", exc)
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        return True
