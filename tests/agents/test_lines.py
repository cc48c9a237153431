"""agents.node.lines: the same bytes give the same lines however they are chunked, which is what
lets a restarted agent skip exactly the lines it already shipped."""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from agents.node.lines import LineSplitter, split_chunks

MAX = 8  # a tiny limit so splits happen often


def lines_of(chunks: list[bytes]) -> list[str]:
    out: list[str] = []
    split_chunks(chunks, out.append, MAX)
    return out


def cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


alphabet = st.sampled_from([b"a", b"\n", "é".encode(), b"\xff", "€".encode(), b"xyz"])


@given(st.lists(alphabet, max_size=60).map(b"".join), st.lists(st.integers(0, 500)))
def test_chunking_never_changes_the_lines(data, points):
    assert lines_of(cut(data, points)) == lines_of([data])


@given(st.lists(alphabet, max_size=60).map(b"".join), st.integers(0, 500))
def test_a_reread_after_a_crash_continues_exactly(data, crash_at):
    """Lines emitted before a crash (an unfinished read), then a fresh read that skips as
    many lines, together equal one uninterrupted read."""
    full = lines_of([data])
    before: list[str] = []
    LineSplitter(before.append, MAX).feed(data[: crash_at % (len(data) + 1)])  # no finish()
    again = lines_of([data])[len(before) :]
    assert before + again == full
    assert before == full[: len(before)]


def test_long_lines_split_and_invalid_bytes_replaced():
    assert lines_of([b"abcdefghij\nok\n\xffx\n"]) == ["abcdefgh", "ij", "ok", "\ufffdx"]
    assert lines_of([b"abcdefgh\nnext"]) == ["abcdefgh", "next"]  # exact split: no empty line


def test_pieces_of_a_cut_line_say_that_they_continue():
    from agents.node.lines import ContinuedLine

    out: list[str] = []
    split_chunks([b"abcdefghij\nxy\n", b"1234567890abcdefZ"], out.append, MAX)
    assert out == ["abcdefgh", "ij", "xy", "12345678", "90abcdef", "Z"]
    assert [isinstance(line, ContinuedLine) for line in out] == [
        True, False, False, True, True, False,
    ]  # fmt: skip
    # Exactly at the limit, then a newline: a whole line, nothing continues.
    out = []
    split_chunks([b"abcdefgh", b"\nz\n"], out.append, MAX)
    assert out == ["abcdefgh", "z"] and not any(isinstance(x, ContinuedLine) for x in out)


@given(st.lists(alphabet, max_size=60).map(b"".join), st.lists(st.integers(0, 500)))
def test_joining_the_pieces_gives_the_lines_back(data, points):
    from agents.node.lines import ContinuedLine

    out: list[str] = []
    split_chunks(cut(data, points), out.append, MAX)
    joined = "".join(line if isinstance(line, ContinuedLine) else line + "\n" for line in out)
    expected = data.decode("utf-8", errors="replace")
    assert joined == (expected if expected.endswith("\n") or not expected else expected + "\n")
