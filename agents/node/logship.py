"""Log shipping: per-worker sequence numbers, batches, resend until acknowledged
(docs/agent-protocol.md).

Every line gets the next sequence number of its worker, starting at the console's
`log_next_seq` for that pod. Unacknowledged lines stay buffered and are re-sent from the
first unacknowledged one; the console stores each sequence once, so re-sending is safe.
A batch goes out when a worker has `limits.LINES_PER_BATCH` pending lines or its oldest
pending line is FLUSH_AFTER seconds old (or at once when the worker has exited, unless the
console takes an exit's last lines in the heartbeat that reports it: `ride`). A worker's
lines are in one request at a time, so their acks come back in order.

The buffer is bounded per worker, and so is each worker's rate (a token bucket of lines).
Lines over either limit are counted and dropped, and a marker line saying how many were
lost and why takes their place once there is room: truncation is explicit, and sequence
numbers stay contiguous, so the console never waits for a gap.

With a journal dir (the agent's state dir), every buffered line is also appended to a
per-worker journal file before it can be sent: `[seq, source lines read so far, text]`
(and a 1 after a piece of a line that was cut at the length limit),
after a header `{"base", "src"}`. While the console is unreachable the lines wait there
(bounded by the same limit), and an agent restarted after `kill -9` reloads them, re-sends
them in order and resumes reading the worker's output after the last journaled source line
(agents.node.runtimes.base): no line is lost or repeated. Acknowledged lines are compacted away.

Nothing is re-sent forever (docs/agent-protocol.md). Lines the console refuses (`LogAck.refused`: a
malformed item) REFUSALS_BEFORE_SET_ASIDE times in a row are set aside: one marker line
takes their place, with their sequence numbers' start, and the stream moves on. A request
the console fails on as a whole (5xx, 400) is split: its workers' lines are then sent one
worker at a time, so only the one that fails is retried and, after as many failures, set
aside. A stream whose marker lines are refused too is dropped.
"""

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

from agents.node.client import ConsoleRefused, ServerFailed
from agents.node.lines import ContinuedLine
from agents.node.logstream import RATE_BURST, RATE_LINES, LogStream, load_journal
from protocol import limits
from protocol.agent import LogAck, LogBatch, LogLines

log = logging.getLogger(__name__)

# Soon enough that a printed line is on the job page within a second (its page polls twice
# a second); a busy worker still fills limits.LINES_PER_BATCH batches long before this.
FLUSH_AFTER = 0.15
MAX_REQUEST_BYTES = 1024 * 1024  # well under the console's 2.5 MB request limit
MAX_BUFFERED_BYTES = 64 * 1024 * 1024  # per worker, in memory and in its journal
_JOURNAL = re.compile(r"^(\d+)-(\d+)\.jsonl$")


class LogShipper:
    """Thread-safe: runtime threads append, one shipping thread sends."""

    def __init__(
        self,
        send: Callable[[LogBatch], LogAck],
        *,
        max_lines: int = limits.LINES_PER_BATCH,
        flush_after: float = FLUSH_AFTER,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_buffered_bytes: int = MAX_BUFFERED_BYTES,
        rate_lines: float = RATE_LINES,
        rate_burst: float = RATE_BURST,
        journal_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self.rate_lines = rate_lines
        self.rate_burst = rate_burst
        self.journal_dir = Path(journal_dir) if journal_dir is not None else None
        if self.journal_dir is not None:
            self.journal_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.max_lines = max_lines
        self.flush_after = flush_after
        self.max_request_bytes = max_request_bytes
        self.max_buffered_bytes = max_buffered_bytes
        self._clock = clock
        self._streams: dict[int, LogStream] = {}
        self._cond = threading.Condition()
        self._retry = threading.Event()
        # Workers whose lines are sent alone, one request each, after a request carrying
        # them failed as a whole: so only the bad one is retried (and set aside).
        self._suspects: deque[int] = deque()
        # Workers whose lines are in a request now (a batch, or a heartbeat they ride in):
        # one request at a time per worker, so acks never arrive out of order.
        self._sending: set[int] = set()
        # The console takes an exited worker's last lines in the heartbeat that reports the
        # exit (`ride`): the shipping thread no longer sends them the moment it exits.
        self.exits_ride = False
        # The console takes end-of-stream markers (`LogLines.end`, its reply's `log_end`):
        # a closed stream is done only once the console acknowledged its end.
        self.sends_end = False

    # --- producers ---

    def _new_stream(self, pod_id: int, attempt: int, base: int) -> LogStream:
        return LogStream(
            pod_id,
            attempt,
            base=base,
            limit=self.max_buffered_bytes,
            rate=self.rate_lines,
            burst=self.rate_burst,
        )

    def open(self, pod_id: int, attempt: int, next_seq: int) -> None:
        with self._cond:
            if pod_id not in self._streams:
                stream = self._new_stream(pod_id, attempt, next_seq)
                if self.journal_dir is not None:
                    stream.open_journal(self.journal_dir / f"{pod_id}-{attempt}.jsonl")
                self._streams[pod_id] = stream

    def recover(self) -> dict[int, tuple[int, int]]:
        """Reload the journals a previous agent run left: {pod_id: (attempt, source lines
        already read)}. Their lines are re-sent; the console stores each sequence once."""
        found: dict[int, tuple[int, int]] = {}
        if self.journal_dir is None:
            return found
        for path in sorted(self.journal_dir.iterdir()):
            if path.name.endswith(".tmp"):  # a rewrite cut short (disk full, killed)
                path.unlink(missing_ok=True)
                continue
            match = _JOURNAL.match(path.name)
            if not match:
                continue
            pod_id, attempt = int(match[1]), int(match[2])
            try:
                base, base_src, lines = load_journal(path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("unreadable log journal %s (%s); dropping it", path, exc)
                path.unlink(missing_ok=True)
                continue
            with self._cond:
                stream = self._new_stream(pod_id, attempt, base)
                stream.base_src = base_src
                stream.lines.extend(lines)
                stream.size = sum(size for _, size, _ in lines)
                stream.src = lines[-1][2] if lines else base_src
                stream.pending_since = self._clock() if lines else None
                stream.open_journal(path)  # rewritten without a torn last line
                self._streams[pod_id] = stream
            found[pod_id] = (attempt, stream.src)
        return found

    def append(self, pod_id: int, line: str, source: bool = True) -> None:
        with self._cond:
            stream = self._streams.get(pod_id)
            if stream is None:
                return  # rejected by the console, or never opened: nowhere to send it
            first = stream.pending_since is None
            stream.add(line, self._clock(), source)
            # The first line of a batch sets when it is due; a full batch is due now.
            if first or len(stream.lines) >= self.max_lines:
                self._cond.notify_all()

    def close(self, pod_id: int) -> None:
        """The worker has exited: ship what is left now, forget the stream once acked."""
        with self._cond:
            stream = self._streams.get(pod_id)
            if stream is not None:
                stream.closed = True
                stream.settle(self._clock(), force=True)  # its last drops get their marker
                self._drop_if_done(stream)
                self._cond.notify_all()

    # --- shipping ---

    def _drop_if_done(self, stream: LogStream) -> None:
        if stream.closed and stream.drained and (stream.end_acked or not self.sends_end):
            self._streams.pop(stream.pod_id, None)
            stream.delete_journal()

    def _end_due(self, s: LogStream) -> bool:
        """A closed stream whose lines are all acknowledged still owes its end marker."""
        return self.sends_end and s.closed and s.drained and not s.end_acked

    def _due(self, now: float) -> bool:
        for s in self._streams.values():
            if s.dropped:  # a worker gone quiet after drops: its marker goes out too
                s.settle(now, force=s.closed)
            if s.pod_id in self._sending:
                continue
            if not s.lines:
                if self._end_due(s):
                    return True
                continue
            if (s.closed and not self.exits_ride) or len(s.lines) >= self.max_lines:
                return True
            if s.pending_since is not None and now - s.pending_since >= self.flush_after:
                return True
        return False

    def _wait_time(self, now: float) -> float:
        """How long the shipping thread may sleep: until the oldest pending line of any
        worker is FLUSH_AFTER old (at most 0.25 s; an append wakes it sooner)."""
        soonest = 0.25
        for s in self._streams.values():
            if s.pod_id in self._sending:
                continue  # in a heartbeat now: `rode` wakes this thread when it is answered
            if s.dropped:
                soonest = min(soonest, 0.05)
            if s.lines and s.pending_since is not None:
                soonest = min(soonest, s.pending_since + self.flush_after - now)
        return max(soonest, 0.005)

    def _solo(self) -> list[LogStream] | None:
        """The next suspect stream alone, while there are suspects; else None (all)."""
        while self._suspects:
            stream = self._streams.get(self._suspects[0])
            if stream is not None and stream.lines:
                return [stream]
            self._suspects.popleft()
        return None

    def take_batch(self) -> LogBatch | None:
        """Every stream's unacknowledged lines, oldest first, within the request limits
        (not those of a stream already in a request)."""
        with self._cond:
            solo = self._solo()
            batches = self._lines_of(solo if solo is not None else self._streams.values())
            return LogBatch(batches=batches) if batches else None

    def _lines_of(self, streams: Iterable[LogStream]) -> list[LogLines]:
        """Up to a request's worth of these streams' pending lines; caller holds the lock."""
        budget = self.max_request_bytes
        batches: list[LogLines] = []
        for s in streams:
            if s.pod_id in self._sending:
                continue
            lines = []
            for text, size, _src in s.lines:
                if len(lines) >= self.max_lines or (size > budget and (lines or batches)):
                    break
                lines.append(text)
                budget -= size
            # The last lines of a closed stream carry its end; so does an empty batch when
            # they are all acknowledged already.
            end = self.sends_end and s.closed and not s.dropped and len(lines) == len(s.lines)
            if lines or (end and not s.end_acked):
                continued = [i for i, t in enumerate(lines) if isinstance(t, ContinuedLine)]
                batches.append(
                    LogLines(
                        pod_id=s.pod_id,
                        attempt=s.attempt,
                        first_seq=s.base,
                        lines=[str(t) for t in lines],
                        continued=continued,
                        end=end,
                    )
                )
            if budget <= 0 or len(batches) >= limits.STREAMS_PER_REQUEST:
                break
        return batches

    def ride(self, pod_ids: Iterable[int]) -> list[LogLines]:
        """These (exited) workers' pending lines, to send in the heartbeat that reports
        them; they are in that request until `rode` (none of a stream in a batch now)."""
        with self._cond:
            streams = [self._streams[p] for p in pod_ids if p in self._streams]
            batches = self._lines_of(streams)
            self._sending.update(b.pod_id for b in batches)
            return batches

    def rode(self, batches: list[LogLines], ack: LogAck | None) -> None:
        """The heartbeat carrying `batches` is answered (`ack`: the console's ack of them)
        or failed (None: they are sent again, by the shipping thread or the next one)."""
        if not batches:
            return
        with self._cond:
            self._sending.difference_update(b.pod_id for b in batches)
            if ack is not None:
                self.apply_ack(ack, LogBatch(batches=batches))
            self._cond.notify_all()

    def apply_ack(self, ack: LogAck, batch: LogBatch | None = None) -> None:
        now = self._clock()
        batches = batch.batches if batch is not None else []
        sent = {b.pod_id: len(b.lines) for b in batches}
        ends = {b.pod_id: b.first_seq + len(b.lines) for b in batches if b.end}
        with self._cond:
            for pod_id, next_seq in ack.acks.items():
                stream = self._streams.get(pod_id)
                if stream is not None:
                    stream.ack(next_seq, now)
                    if pod_id in ends and next_seq >= ends[pod_id] and stream.drained:
                        stream.end_acked = True
                    self._drop_if_done(stream)
            for pod_id, reason in ack.rejected.items():
                stream = self._streams.pop(pod_id, None)
                if stream is not None:
                    stream.delete_journal()
                    log.warning("console refuses logs of pod %s: %s; dropping them", pod_id, reason)
            for pod_id, reason in ack.refused.items():
                stream = self._streams.get(pod_id)
                if stream is not None:
                    self._refused(stream, sent.get(pod_id, self.max_lines), reason)
            if len(sent) == 1 and self._suspects and self._suspects[0] in sent:
                self._suspects.popleft()  # its turn alone went through
            self._cond.notify_all()

    def _refused(self, stream: LogStream, count: int, reason: str) -> None:
        """Its oldest `count` lines were refused (or failed) once more; caller holds the lock."""
        stream.refusals += 1
        log.warning(
            "pod %s: the console refused %d log lines (%d/%d): %s",
            stream.pod_id,
            count,
            stream.refusals,
            limits.REFUSALS_BEFORE_SET_ASIDE,
            reason,
        )
        if stream.refusals < limits.REFUSALS_BEFORE_SET_ASIDE:
            return
        if stream.set_asides >= 2:  # even the marker lines are refused: nothing gets through
            log.error("pod %s: the console refuses every log line; dropping them", stream.pod_id)
            self._streams.pop(stream.pod_id, None)
            stream.delete_journal()
            return
        times = limits.REFUSALS_BEFORE_SET_ASIDE
        stream.set_aside(count, f"the console refused them {times} times ({reason[:200]})")

    def _failed(self, batch: LogBatch, exc: Exception) -> None:
        """The console failed on this request as a whole (not unreachable: it answered)."""
        with self._cond:
            pods = [b.pod_id for b in batch.batches]
            if len(pods) > 1:
                for pod_id in pods:
                    if pod_id not in self._suspects:
                        self._suspects.append(pod_id)
                log.warning(
                    "the console failed on the lines of %d workers (%s); sending them one "
                    "worker at a time",
                    len(pods),
                    exc,
                )
                return
            stream = self._streams.get(pods[0])
            if stream is not None:
                self._refused(stream, len(batch.batches[0].lines), str(exc))
                if pods[0] not in self._suspects:
                    self._suspects.appendleft(pods[0])

    def ship_once(self) -> bool:
        """Send one batch if there is anything unacknowledged. Raises what `send` raises."""
        with self._cond:
            batch = self.take_batch()
            if batch is None:
                return False
            pods = {b.pod_id for b in batch.batches}
            self._sending |= pods
        try:
            ack = self._send(batch)
        except ServerFailed as exc:
            self._failed(batch, exc)
            raise
        except ConsoleRefused as exc:
            if exc.status not in (401, 403):  # a credential problem is no poisoned batch
                self._failed(batch, exc)
            raise
        else:
            self.apply_ack(ack, batch)
        finally:
            with self._cond:
                self._sending -= pods
                self._cond.notify_all()
        return True

    def run(self, stop: threading.Event, *, retry_cap: float = 30.0) -> None:
        """The shipping thread: send when due, back off while the console is unreachable."""
        delay = 0.5
        stop_waits = threading.Thread(
            target=lambda: (stop.wait(), self._retry.set()), name="log-shipper-stop", daemon=True
        )
        stop_waits.start()
        while not stop.is_set():
            with self._cond:
                now = self._clock()
                if not self._due(now):
                    self._cond.wait(self._wait_time(now))
                    continue
            try:
                self.ship_once()
                delay = 0.5
            except Exception as exc:  # transport errors: keep the lines, retry later
                log.warning("log shipping failed (%s); retrying in %.1fs", exc, delay)
                self._retry.clear()
                self._retry.wait(delay)
                delay = min(delay * 2, retry_cap)

    def close_all(self) -> None:
        """Close the journal files (the agent is exiting; unsent lines stay on disk)."""
        with self._cond:
            for stream in self._streams.values():
                stream._close_journal()

    def retry_now(self) -> None:
        """The console answered again (a heartbeat went through): end the backoff."""
        self._retry.set()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # --- queries ---

    def drained(self, pod_ids: Iterable[int] | None = None) -> bool:
        with self._cond:
            ids = self._streams.keys() if pod_ids is None else pod_ids
            return all(self._streams.get(p) is None or self._streams[p].drained for p in list(ids))

    def mark_delivered(self, reports: list, riding: Iterable[LogLines] = ()) -> list:
        """Exit reports of workers whose lines are all acknowledged, or all `riding` in the
        same heartbeat, say so (logs_delivered): a follower of their logs can stop at once
        (the console takes it back for lines it did not store)."""
        sent = {b.pod_id: len(b.lines) for b in riding}
        with self._cond:

            def delivered(pod_id: int) -> bool:
                stream = self._streams.get(pod_id)
                if stream is None:
                    return True
                return (
                    stream.closed
                    and not stream.dropped
                    and len(stream.lines) == sent.get(pod_id, 0)
                )

            return [
                r.model_copy(update={"logs_delivered": True})
                if r.state == "exited" and delivered(r.pod_id)
                else r
                for r in reports
            ]

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
        while not self.drained() or any(self._end_due(s) for s in list(self._streams.values())):
            if time.monotonic() >= deadline:
                return False
            try:
                if not self.ship_once():
                    return True
            except Exception as exc:
                log.warning("log flush failed: %s", exc)
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        return True
