"""What differs between two runs (docs/results.md, "Compare with run…"): the effective
configuration key by key (nested settings as dotted keys: `env.LR`, `ft_config.max_restarts`)
and what the runtime resolved when each run first started (image digest, executable hash,
code version, data folders' fingerprint and content sha256). Pure: the job page, the API and
the CLI show the same list."""

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# What the agent resolved, as the run identity's attempt facts name it.
RESOLVED = (
    "image_digest",
    "executable_sha256",
    "code_version",
    "inputs_fingerprint",
    "inputs_sha256",
)
RESOLVED_PREFIX = "resolved."


@dataclass(frozen=True)
class Change:
    """One key whose value differs; `*_set` False: the key is absent from that run."""

    key: str
    this: Any = None
    other: Any = None
    this_set: bool = True
    other_set: bool = True

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "this": self.this,
            "other": self.other,
            "this_set": self.this_set,
            "other_set": self.other_set,
        }


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys; lists and scalars are values (a list is compared
    whole); an empty mapping is a value of its own (`{}`), so adding its first key shows."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat |= flatten(value, f"{path}.")
        else:
            flat[path] = value
    return flat


def resolved(facts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the runtime resolved when the run first started: its first attempt's rank 0
    (a later attempt of the same run may have re-resolved, but the result began there).
    `facts`: rows with attempt, rank and the RESOLVED fields; empty fields are left out."""
    first = min(facts, key=lambda f: (f["attempt"], f["rank"]), default=None)
    if first is None:
        return {}
    return {f"{RESOLVED_PREFIX}{k}": first[k] for k in RESOLVED if first.get(k)}


def changes(this: Mapping[str, Any], other: Mapping[str, Any]) -> list[Change]:
    """Every key whose value differs (or that only one side has), sorted by key."""
    a, b = flatten(this), flatten(other)
    found = []
    for key in sorted(a.keys() | b.keys()):
        if key in a and key in b:
            if _same(a[key], b[key]):
                continue
            found.append(Change(key, a[key], b[key]))
        elif key in a:
            found.append(Change(key, this=a[key], other_set=False))
        else:
            found.append(Change(key, other=b[key], this_set=False))
    return found


def _same(x: Any, y: Any) -> bool:
    # JSON's view: 1 and 1.0 are one number, but True is not 1.
    if isinstance(x, bool) or isinstance(y, bool):
        return type(x) is type(y) and x == y
    return x == y


def shown(value: Any, present: bool = True) -> str:
    """A value as the page prints it: text as it is, the rest as JSON, absent as "—"."""
    if not present:
        return "—"
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value, sort_keys=True, default=str)
