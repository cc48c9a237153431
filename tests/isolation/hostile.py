"""Hypothesis strategies for hostile input: what a careless or malicious job, user or agent
can send. NUL, lone surrogates, control and bidirectional characters, huge and deeply nested
values, wrong types."""

import json

from hypothesis import strategies as st

NASTY_CHARS = [
    "\x00",
    "\ud800",
    "\udfff",
    "\u202e",
    "\u2066",
    "\u200f",
    "\u200b",
    "\ufeff",
    "\x1b[31m",
    "\x7f",
    "\n",
    "\r",
    "\t",
    "\u2028",
    "\U0001f600",
    "'",
    '"',
    "\\",
    "<script>",
    "%s",
    "{}",
]

characters = st.one_of(
    st.characters(codec=None),  # any code point, lone surrogates included
    st.sampled_from([c for c in NASTY_CHARS if len(c) == 1]),
)
short_text = st.one_of(
    st.text(alphabet=characters, max_size=40),
    st.lists(st.sampled_from(NASTY_CHARS), max_size=8).map("".join),
)
long_text = st.builds(
    lambda piece, times: piece * times,
    st.sampled_from(["a", "\x00", "\u202e", "ab\n", "\ud800", "é"]),
    st.integers(min_value=100, max_value=40_000),
)
text = st.one_of(short_text, short_text, long_text)
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63)]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, text)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(short_text, children, max_size=4)
    ),
    max_leaves=12,
)


class RawJson(str):
    """JSON text written out directly (nesting too deep for json.dumps to write)."""


def deep(depth: int) -> RawJson:
    opening = "".join('{"k": ' if level % 2 else "[" for level in range(depth))
    closing = "".join("}" if level % 2 else "]" for level in reversed(range(depth)))
    return RawJson(opening + "1" + closing)


nested = st.integers(min_value=20, max_value=3_000).map(deep)
anything = st.one_of(values, values, nested)


def dumps(value: object) -> str:
    """JSON as a hostile client writes it: lone surrogates as \\ud800 escapes, NaN and
    Infinity as bare words, raw nesting as it is."""
    if isinstance(value, RawJson):
        return str(value)
    return json.dumps(value)


def dumps_with(base: dict, key: str, value: object) -> str:
    """`base` with `key` set to `value`, as JSON text."""
    rest = {k: v for k, v in base.items() if k != key}
    head = json.dumps(rest)[:-1]
    return f"{head}{', ' if rest else ''}{json.dumps(key)}: {dumps(value)}}}"
