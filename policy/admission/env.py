"""A job's environment as submitted: KEY=VALUE lines (a page's textarea) or an object of
strings (the API), checked variable by variable against what an agent accepts."""

from typing import Any

from policy.secrets import placeholder_problem
from protocol import limits
from protocol.devices import is_device_env
from protocol.text import name_problem, text_problem
from protocol.workerenv import is_worker_env


class EnvProblems(ValueError):
    """Every problem of an environment at once (one message per variable or line)."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__(*messages)
        self.messages = messages


def _shown(text: str) -> str:
    """A user's value quoted in an error message: short, and safe to display."""
    short = text if len(text) <= 40 else text[:40] + "…"
    return ascii(short) if name_problem(short) else repr(short)


def _items(value: dict | str, errors: list[str]) -> list[tuple[str, str]]:
    items = []
    if isinstance(value, dict):
        for key, val in value.items():
            if not isinstance(val, str):
                errors.append(f"{_shown(str(key))}: the value must be a string")
            items.append((str(key), val if isinstance(val, str) else ""))
        return items
    for number, line in enumerate(value.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "=" not in line:
            errors.append(f"line {number}: expected KEY=VALUE, got {_shown(stripped)}")
            continue
        key, val = line.split("=", 1)
        items.append((key.strip(), val))
    return items


def _problem(key: str, val: str, env: dict[str, str]) -> str | None:
    shown = _shown(key)
    if len(key) > limits.ENV_NAME:
        return f"{shown} is longer than {limits.ENV_NAME} characters"
    if not limits.ENV_NAME_RE.fullmatch(key):
        return (
            f"{shown} is not a valid variable name (letters, digits and _, "
            "not starting with a digit)"
        )
    if is_device_env(key):
        return (
            f"{key} cannot be set: each worker sees exactly the GPUs it was given "
            "(the agent sets the device variables)"
        )
    if is_worker_env(key):
        return f"{key} cannot be set: the agent sets it for each worker"
    if key in env:
        return f"{key} is set twice"
    if text_problem(val):
        return f"{key}: the value {text_problem(val)}"
    if len(val) > limits.ENV_VALUE:
        return f"{key}: the value is longer than {limits.ENV_VALUE} characters"
    return placeholder_problem(key, val)


def parse_env(value: Any) -> dict[str, str]:
    """KEY=VALUE lines (blank lines and # comments ignored) or a JSON object of strings;
    raises EnvProblems with every problem found."""
    if value in (None, ""):
        return {}
    if not isinstance(value, dict | str):
        raise EnvProblems(["Environment must be KEY=VALUE lines or an object."])
    errors: list[str] = []
    env: dict[str, str] = {}
    items = _items(value, errors)
    for key, val in items:
        problem = _problem(key, val, env)
        if problem:
            errors.append(problem)
        else:
            env[key] = val
    if len(items) > limits.ENV_VARS:
        errors.append(f"at most {limits.ENV_VARS} variables")
    if errors:
        raise EnvProblems(errors)
    return env
