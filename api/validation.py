"""Validation errors as the API words them (api.main's handler, and a batch's items one by
one: api.jobs.create_batch): a field's dotted name ("jobs.3.workers") and a message that
says the JSON type it needs ("workers must be an integer.")."""

from collections.abc import Iterable
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from api import schemas

CONTAINERS = {"jobs", "job"}  # body fields that hold jobs: errors name the job's field


def _field_of(loc: list) -> str | None:
    """`("body", "payload", "jobs", 3, "workers", "int")` → "jobs.3.workers"."""
    if not loc:
        return None
    source, rest = loc[0], list(loc[1:])
    if source == "body":
        rest = rest[1:]  # the body parameter's own name (query, path: the parameter itself)
    parts: list[str] = []
    for element in rest:
        parts.append(str(element))
        if isinstance(element, str) and element not in CONTAINERS:
            break
    return ".".join(parts) or None


def _message(error: dict, field: str | None) -> str:
    kind = error.get("type", "")
    name = field or "The body"
    if kind == "extra_forbidden":
        return f"Unknown field {field.rsplit('.', 1)[-1]!r}." if field else "Unknown field."
    if kind == "missing":
        return f"{name} is required."
    last = (field or "").rsplit(".", 1)[-1]
    if kind.endswith(_TYPE_ERRORS) and JOB_FIELD_TYPES.get(last):
        return f"{name} must be {JOB_FIELD_TYPES[last]}."
    return f"{name}: {error.get('msg', 'invalid value')}."


_TYPE_ERRORS = ("_type", "_parsing", "from_float")
_JSON_NAMES = {int: "an integer", str: "a string", bool: "a boolean", dict: "an object of strings"}


def _json_types(annotation) -> str:
    """ "an integer or a string" for StrictInt | StrictStr | None (null is implied)."""
    names: list[str] = []
    pending = [annotation]
    while pending:
        member = pending.pop(0)
        origin = get_origin(member)
        if origin is Annotated:
            pending.insert(0, get_args(member)[0])
        elif origin in (Union, UnionType):
            pending[:0] = get_args(member)
        else:
            name = _JSON_NAMES.get(origin or member)
            if name and name not in names:
                names.append(name)
    return " or ".join(names)


JOB_FIELD_TYPES = {
    name: _json_types(info.annotation) for name, info in schemas.JobCreate.model_fields.items()
}


def field_messages(errors: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """Pydantic's errors (their `loc` as ninja gives them: the source first) → field name
    ("__all__" for none) → its messages, in order."""
    fields: dict[str, list[str]] = {}
    for error in errors:
        field = _field_of(list(error.get("loc", ())))
        messages = fields.setdefault(field or "__all__", [])
        message = _message(error, field)
        if message not in messages:  # a union reports once per member type
            messages.append(message)
    return fields
