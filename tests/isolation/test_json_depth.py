"""The depth check that runs before any JSON body is parsed (protocol.text.load_json):
the nesting of arrays and objects outside strings, against a plain character walk."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.text import JsonBodyError, _nesting, load_json


def walked_depth(raw: str) -> int:
    """The reference: one character at a time, inside or outside a string."""
    deepest = depth = 0
    in_string = escaped = False
    for char in raw:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet='[]{}"\\ a,:1\n', max_size=200))
def test_depth_matches_a_character_walk_on_any_text(raw):
    assert _nesting(raw) == walked_depth(raw)


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(alphabet='ab[]{}"\\', max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=20,
    )
)
def test_depth_of_real_json_documents(value):
    raw = json.dumps(value)
    assert _nesting(raw) == walked_depth(raw)


def test_brackets_in_strings_and_open_strings_do_not_count():
    assert _nesting('{"a": "[[[{{{"}') == 1
    assert _nesting('["\\"[[", [1]]') == 2
    assert _nesting('["open [[[') == 1
    assert _nesting("]]]") == 0
    assert _nesting("") == 0


def test_a_body_too_deep_is_refused_before_parsing():
    deep = "[" * 33 + "]" * 33
    try:
        load_json(deep)
    except JsonBodyError as exc:
        assert exc.code == "invalid_json"
    else:
        raise AssertionError("a body nested 33 deep was parsed")
    assert load_json("[" * 32 + "]" * 32) is not None
