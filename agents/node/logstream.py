"""One worker's log stream on the agent: its buffered lines, sequence numbers, rate limit
and on-disk journal (agents.node.logship ships the streams; its docstring tells how).

Lines are `(text, json size, source lines read so far)`; line i has sequence number
`base + i`. The journal holds a header `{"base", "src"}`, then `[seq, src, text]` per line (and a 1
after a piece of a line that was cut at the length limit: agents.node.lines.ContinuedLine).
"""

import contextlib
import json
import logging
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from agents.node.lines import ContinuedLine

log = logging.getLogger(__name__)

COMPACT_AFTER = 4 * 1024 * 1024  # rewrite a journal once this much of it is acknowledged
RATE_LINES = 5000.0  # per worker and second, sustained…
RATE_BURST = 50_000.0  # …after a burst of this many lines


def json_size(line: str) -> int:
    return len(json.dumps(line, ensure_ascii=False).encode()) + 1


def _entry(seq: int, src: int, text: str) -> list:
    """A journal line: [seq, source lines read, text] plus 1 for a cut line's piece."""
    entry = [seq, src, str(text)]
    return [*entry, 1] if isinstance(text, ContinuedLine) else entry


@dataclass
class LogStream:
    pod_id: int
    attempt: int
    base: int  # sequence number of lines[0]
    limit: int  # buffered bytes
    rate: float = RATE_LINES
    burst: float = RATE_BURST
    lines: deque = field(default_factory=deque)  # (text, json size, source count)
    size: int = 0
    src: int = 0  # the worker's own output lines read so far (dropped ones included)
    base_src: int = 0  # source lines read when line `base` was the next one
    dropped: int = 0
    # The console acknowledged the end of this (closed) stream: every line, then the end
    # marker (`LogLines.end`); nothing of it is left to send.
    end_acked: bool = False
    dropped_why: str = ""
    tokens: float | None = None
    refilled: float = 0.0
    pending_since: float | None = None  # when the oldest unacknowledged line arrived
    closed: bool = False
    journal: Path | None = None
    _file: object = None
    _acked_bytes: int = 0
    refusals: int = 0  # refusals (or failures) in a row of its oldest lines
    set_asides: int = 0  # times lines were set aside without any accepted since

    @property
    def next_seq(self) -> int:
        return self.base + len(self.lines)

    def _refill(self, now: float) -> None:
        if self.tokens is None:
            self.tokens, self.refilled = self.burst, now
        self.tokens = min(self.burst, self.tokens + (now - self.refilled) * self.rate)
        self.refilled = now

    def add(self, line: str, now: float, source: bool = True) -> None:
        if source:
            self.src += 1
        self.settle(now)
        if self.dropped or self.size >= self.limit or self.tokens < 1:
            if not self.dropped:
                self.dropped_why = (
                    "buffer full" if self.size >= self.limit else f"over {self.rate:g} lines/s"
                )
            self.dropped += 1
            return
        self.tokens -= 1
        self._push(line, now)

    def settle(self, now: float, *, force: bool = False) -> None:
        """Once there is room again, one line stands for everything dropped meanwhile; at
        once with `force` (the worker has exited: nothing more comes to make room for)."""
        self._refill(now)
        if self.dropped and (force or (self.size < self.limit // 2 and self.tokens >= 1)):
            self._push(f"[agent] {self.dropped} log lines dropped: {self.dropped_why}", now)
            self.dropped = 0

    def _push(self, line: str, now: float) -> None:
        item = (line, json_size(line), self.src)
        if self._file is not None:
            self._write(_entry(self.next_seq, self.src, line))
        self.lines.append(item)
        self.size += item[1]
        if self.pending_since is None:
            self.pending_since = now

    # --- the journal ---

    def _write(self, entry) -> None:
        try:
            self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        except (OSError, ValueError) as exc:  # disk full: keep the lines in memory only
            log.warning("pod %s: log journal write failed (%s); memory only", self.pod_id, exc)
            self._close_journal()

    def open_journal(self, path: Path) -> None:
        self.journal = path
        self._rewrite()

    def _rewrite(self) -> None:
        """Write the journal afresh: the header, then the unacknowledged lines."""
        if self.journal is None:
            return
        self._close_journal()
        tmp = self.journal.with_name(self.journal.name + ".tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(json.dumps({"base": self.base, "src": self.base_src}) + "\n")
                seq = self.base
                for text, _size, src in self.lines:
                    f.write(json.dumps(_entry(seq, src, text), ensure_ascii=False) + "\n")
                    seq += 1
            os.replace(tmp, self.journal)
            self._file = open(self.journal, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        except OSError as exc:
            with contextlib.suppress(OSError):  # disk full, read-only: leave no empty temp file
                tmp.unlink(missing_ok=True)
            log.warning("pod %s: cannot write log journal (%s); memory only", self.pod_id, exc)
        self._acked_bytes = 0

    def _close_journal(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def delete_journal(self) -> None:
        self._close_journal()
        if self.journal is not None:
            self.journal.unlink(missing_ok=True)
            self.journal = None

    # --- acknowledgements ---

    def ack(self, next_seq: int, now: float) -> None:
        if next_seq < self.base:
            # The console lacks lines we no longer hold (it lost data): renumber what we
            # have so it continues without a gap, and say so in the log itself.
            self.base = next_seq
            item = ("[agent] earlier log lines were lost", 40, self.base_src)
            self.lines.appendleft(item)
            self.size += item[1]
            self._rewrite()
            return
        if next_seq > self.base:  # the console took lines: whatever was refused is over
            self.refusals = self.set_asides = 0
        while self.lines and self.base < next_seq:
            _text, size, src = self.lines.popleft()
            self.size -= size
            self._acked_bytes += size + 16
            self.base += 1
            self.base_src = src
        if self.base < next_seq:  # the console already has more than we sent
            self.base = next_seq
        self.pending_since = now if self.lines else None
        if self._acked_bytes > COMPACT_AFTER:
            self._rewrite()
        self.settle(now, force=self.closed)

    def set_aside(self, count: int, reason: str) -> None:
        """Replace the oldest `count` lines with one marker line that takes the first one's
        sequence number, so the console never waits for a gap."""
        count = min(count, len(self.lines))
        src = self.base_src
        for _ in range(count):
            _text, size, src = self.lines.popleft()
            self.size -= size
        marker = f"[agent] {count} log lines set aside: {reason}"
        self.lines.appendleft((marker, json_size(marker), src))
        self.size += json_size(marker)
        self.refusals = 0
        self.set_asides += 1
        self._rewrite()

    @property
    def drained(self) -> bool:
        """Done: every line acknowledged, and what was dropped said so by a marker line."""
        return not self.lines and not self.dropped


def load_journal(path: Path) -> tuple[int, int, list[tuple[str, int, int]]]:
    """(base, base_src, [(text, json size, src)…]) from a journal; a torn last line (the
    agent was killed while writing it) ends the read."""
    lines: list[tuple[str, int, int]] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        header = json.loads(f.readline())
        base, base_src = int(header["base"]), int(header["src"])
        for raw in f:
            try:
                seq, src, text, *flags = json.loads(raw)
            except ValueError:
                break
            if seq != base + len(lines):
                break
            if flags and flags[0]:
                text = ContinuedLine(text)
            lines.append((text, json_size(text), int(src)))
    return base, base_src, lines
