"""Env values marked secret (docs/results.md, "Run identity"): a variable whose name says it
holds a secret (*SECRET*, *TOKEN*, *PASSW*, *CREDENTIAL*, *PRIVATE*, *API_KEY*, *_KEY) is
given to the job's workers and nowhere else: stored redacted in a run's configuration, shown
redacted by the job page and the API, and not copied by a clone or a template made from the
job (the copy must give the value again; `[redacted]` itself is refused at submission)."""

import re
from collections.abc import Mapping
from typing import Any

_SECRET = re.compile(r"SECRET|TOKEN|PASSW|CREDENTIAL|PRIVATE|(^|_)KEY$|API_?KEY", re.I)
REDACTED = "[redacted]"


def is_secret(name: str) -> bool:
    return bool(_SECRET.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with every secret's value replaced by REDACTED (sorted by name)."""
    return {k: REDACTED if is_secret(k) else v for k, v in sorted(env.items())}


def redact_env_lines(text: str) -> str:
    """KEY=VALUE lines (a page's textarea) with every secret's value replaced."""
    lines = []
    for line in text.splitlines():
        key, sep, _ = line.partition("=")
        secret = sep and not line.lstrip().startswith("#") and is_secret(key.strip())
        lines.append(f"{key}={REDACTED}" if secret else line)
    return "\n".join(lines)


def redacted_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A job's fields (policy.jobspec) as a copy may show them: the env's secrets redacted."""
    env = fields.get("env")
    if isinstance(env, Mapping):
        return {**fields, "env": redact_env(env)}
    if isinstance(env, str) and env:
        return {**fields, "env": redact_env_lines(env)}
    return dict(fields)


def placeholder_problem(key: str, value: str) -> str | None:
    """A copied secret left as its placeholder: the user must give the value again."""
    if value == REDACTED and is_secret(key):
        return (
            f"{key}: give the secret's value again (a copy of a job shows {REDACTED}, "
            "never the value)"
        )
    return None
