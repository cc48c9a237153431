"""Splitting a worker's output bytes into log lines, the same way for every runtime.

Newline removed, invalid UTF-8 replaced, lines longer than `max_bytes` split (a multi-byte
character cut at the split is carried over whole to the next part); every piece but the last
of a split line is a `ContinuedLine`, so the console can join them again for the raw log.
The result does not depend on how the bytes were chunked, so an agent that restarts and reads
a container's (or an output file's) bytes again gets the same lines, and can skip the ones it
already shipped by counting them.
"""

import codecs
from collections.abc import Callable, Iterable

MAX_LINE_BYTES = 16 * 1024


class ContinuedLine(str):
    """A piece of a line longer than the limit, cut there: the next piece is the rest of
    the same line (no newline between them), so the raw log can be rebuilt unchanged."""

    __slots__ = ()


class LineSplitter:
    def __init__(self, emit: Callable[[str], None], max_bytes: int = MAX_LINE_BYTES) -> None:
        self._emit = emit
        self._max = max_bytes
        self._buf = bytearray()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # A piece cut at max_bytes, held until the next byte says whether the line goes on
        # (a ContinuedLine) or ended exactly there (a newline follows: a plain line).
        self._cut: str | None = None

    def feed(self, data: bytes) -> None:
        buf = self._buf
        buf.extend(data)
        start = 0
        while True:
            end = buf.find(b"\n", start, start + self._max)
            if end >= 0:
                piece = bytes(buf[start : end + 1])
                start = end + 1
            elif len(buf) - start >= self._max:
                piece = bytes(buf[start : start + self._max])
                start += self._max
            else:
                break
            self._line(piece)
        del buf[:start]

    def _line(self, chunk: bytes) -> None:
        if self._cut is not None:
            cut, self._cut = self._cut, None
            if chunk == b"\n":
                self._emit(cut)  # the line was exactly max_bytes long
                return
            self._emit(ContinuedLine(cut))
        text = self._decoder.decode(chunk)
        if chunk.endswith(b"\n"):
            self._emit(text[:-1])
        else:
            self._cut = text

    def finish(self) -> None:
        """The output ended: emit what is left of an unterminated last line."""
        if self._buf:
            self._line(bytes(self._buf))
            self._buf.clear()
        if self._cut is not None:
            self._emit(self._cut)
            self._cut = None
        rest = self._decoder.decode(b"", final=True)
        if rest:
            self._emit(rest)


def split_chunks(chunks: Iterable[bytes], emit: Callable[[str], None], max_bytes: int) -> None:
    splitter = LineSplitter(emit, max_bytes)
    for chunk in chunks:
        splitter.feed(chunk)
    splitter.finish()
