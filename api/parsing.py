"""Request bodies and query strings as hostile input: every failure is a stable 4xx.

A body is read by the one safe loader every JSON boundary shares (`accounts.api_auth.
json_body`, over `protocol.text.load_json`): UTF-8 JSON, nested at most
`protocol.limits.JSON_DEPTH` levels (checked before parsing, so the decoder's recursion is
never reached), no lone surrogates ("\\ud800" decodes to a str that PostgreSQL and UTF-8
encoders refuse later, half-way through a write), no NaN or Infinity; here it must also be
an object. NUL and other characters a field may not hold are the form's to refuse, with a
field error (one validation path for the page and the API). Size is capped before the body
is read; query strings are checked here (NUL, length).
"""

import json
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from ninja.parser import Parser
from pydantic import BaseModel

from accounts.api_auth import ApiError, json_body

MAX_BODY_BYTES = 2 * 1024 * 1024
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


def parse_json_object(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "too_large", f"The body is larger than {MAX_BODY_BYTES} bytes.")
    if not raw.strip():
        raise ApiError(400, "invalid_json", "The body is empty; send a JSON object.")
    value = json_body(raw)
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_json", "The body must be a JSON object.")
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


def reject_unknown_query(request: HttpRequest, params: type[BaseModel]) -> None:
    """The document says a query takes only its declared parameters (additionalProperties:
    false); a misspelt filter is an error, never silently ignored (it would list everything)."""
    allowed = {field.alias or name for name, field in params.model_fields.items()}
    for key in request.GET:
        if key not in allowed:
            raise ApiError(
                400, "validation_error", f"Unknown query parameter {key[:100]!r}.", key[:100]
            )


@dataclass(frozen=True)
class RestartOptions:
    inputs: str | None = None  # None: the original's
    from_scratch: bool = False


RESTART_BODY = 'The body is {"result_inputs": "…", "from_scratch": true|false} or empty.'


def restart_options(request: HttpRequest) -> RestartOptions:
    """A Restart's optional body (docs/results.md, "Resume without duplicates"):
    `result_inputs` when the inputs changed, `from_scratch` to resume nothing."""
    if not request.body.strip():
        return RestartOptions()
    if request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        if not request.POST and not request.FILES:
            return RestartOptions()  # a form post without fields: no body
        raise ApiError(400, "validation_error", RESTART_BODY)
    try:
        body = json.loads(request.body)
    except ValueError:
        raise ApiError(400, "validation_error", "The body is not JSON.") from None
    if not isinstance(body, dict) or set(body) - {"result_inputs", "from_scratch"}:
        raise ApiError(400, "validation_error", RESTART_BODY)
    value = body.get("result_inputs")
    if value is not None and not isinstance(value, str):
        raise ApiError(400, "validation_error", "result_inputs is a string.", "result_inputs")
    scratch = body.get("from_scratch", False)
    if not isinstance(scratch, bool):
        raise ApiError(400, "validation_error", "from_scratch is true or false.", "from_scratch")
    return RestartOptions(inputs=value, from_scratch=scratch)
