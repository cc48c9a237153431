"""Request bodies and query strings as hostile input: every failure is a stable 4xx.

A body must be UTF-8 JSON, an object at the top, at most `MAX_DEPTH` levels deep (the C
decoder's recursion limit would otherwise surface as a 500), and free of NUL characters and
lone surrogates ("\\ud800" decodes to a str that PostgreSQL and UTF-8 encoders refuse
later, half-way through a write). Size is capped before the body is read.
"""

import json
from typing import Any

from django.http import HttpRequest
from ninja.parser import Parser

from accounts.api_auth import ApiError

MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_DEPTH = 32
MAX_QUERY_VALUE = 2000


def bad_text(value: str) -> str | None:
    """Why a string cannot be stored (NUL, lone surrogate), or None."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (invalid Unicode)"
    return None


def check_value(value: Any) -> None:
    """Walk a decoded JSON value (iteratively) checking depth and every string."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            raise ApiError(400, "invalid_json", f"The body nests deeper than {MAX_DEPTH} levels.")
        if isinstance(item, dict):
            for key, child in item.items():
                problem = bad_text(key)
                if problem:
                    raise ApiError(400, "invalid_json", f"A key {problem}.")
                stack.append((child, depth + 1, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            stack.extend((child, depth + 1, f"{path}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, str):
            problem = bad_text(item)
            if problem:
                field = path.split(".", 1)[0].split("[", 1)[0] or None
                raise ApiError(400, "invalid_text", f"{path or 'The body'} {problem}.", field)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "too_large", f"The body is larger than {MAX_BODY_BYTES} bytes.")
    if not raw.strip():
        raise ApiError(400, "invalid_json", "The body is empty; send a JSON object.")
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ApiError(400, "invalid_json", "The body nests too deeply.") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"The body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_json", "The body must be a JSON object.")
    check_value(value)
    return value


class SafeJsonParser(Parser):
    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        return parse_json_object(request.body)

    def parse_querydict(self, data, list_fields, request):
        for key, values in data.lists():
            for value in values:
                problem = bad_text(value)
                if problem:
                    raise ApiError(400, "invalid_text", f"{key} {problem}.", key)
                if len(value) > MAX_QUERY_VALUE:
                    raise ApiError(
                        400, "validation_error", f"{key} is longer than {MAX_QUERY_VALUE}.", key
                    )
        return super().parse_querydict(data, list_fields, request)
