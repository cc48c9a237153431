"""A scenario's quota tree (docs/simulator.md, docs/quota-tree.md): `parent` with inherited
fields, `max_gpus`, `lending_limit`, `weight`, and the rules an invalid tree breaks. Every
error names the field ("quotas[3].parent: unknown quota 'orgg'"); pure."""

import math

from protocol import words

INHERITED = ("tenant", "resource_type", "gpu_type")
TREE_FIELDS = ("parent", "max_gpus", "lending_limit", "weight")


class ScenarioError(Exception):
    """An invalid scenario; the message starts with the field's path."""


def inherit_parents(items: list[dict]) -> list[dict]:
    """Each quota with a `parent` takes the parent's tenant, resource type and GPU type where
    it names none (a parent's own inherited fields first). Unknown parents and cycles are
    left for `check_tree` to name."""
    by_name = {d.get("name"): d for d in items if isinstance(d.get("name"), str)}
    out: list[dict] = []
    for d in items:
        merged = dict(d)
        seen = {d.get("name")}
        parent = by_name.get(d.get("parent")) if isinstance(d.get("parent"), str) else None
        while parent is not None and parent.get("name") not in seen:
            for key in INHERITED:
                if key not in merged and key in parent:
                    merged[key] = parent[key]
            seen.add(parent.get("name"))
            up = parent.get("parent")
            parent = by_name.get(up) if isinstance(up, str) else None
        out.append(merged)
    return out


def tree_fields(d: dict, where: str) -> dict:
    out: dict = {}
    if "parent" in d:
        parent = d["parent"]
        if not isinstance(parent, str) or not parent.strip():
            raise ScenarioError(f"{where}.parent: expected a quota name, got {parent!r}")
        out["parent"] = parent
    for key in ("max_gpus", "lending_limit"):
        if key in d and d[key] is not None:
            v = d[key]
            if (
                isinstance(v, bool)
                or not isinstance(v, int | float)
                or not math.isfinite(v)  # int() of NaN or infinity raised
                or v != int(v)
            ):
                raise ScenarioError(f"{where}.{key}: expected an integer, got {v!r}")
            if v < 0:
                raise ScenarioError(f"{where}.{key}: must not be negative, got {v!r}")
            out[key] = int(v)
    if "weight" in d:
        v = d["weight"]
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
            raise ScenarioError(f"{where}.weight: must be a number above 0, got {v!r}")
        out["weight"] = float(v)
    return out


def check_tree(quotas: list) -> None:
    """The tree's rules (scenario-style errors naming the field); `quotas` are QuotaSpecs."""
    index = {q.name: i for i, q in enumerate(quotas)}
    for i, q in enumerate(quotas):
        where = f"quotas[{i}]"
        if q.max_gpus is not None and q.max_gpus < q.gpus:
            raise ScenarioError(
                f"{where}.max_gpus: {q.max_gpus} is below the quota's gpus ({q.gpus})"
            )
        if q.parent is None:
            continue
        if q.parent not in index:
            raise ScenarioError(f"{where}.parent: unknown quota {q.parent!r}")
        parent = quotas[index[q.parent]]
        for key in INHERITED:
            if getattr(q, key) != getattr(parent, key):
                raise ScenarioError(
                    f"{where}.parent: {parent.name!r} has another {key.replace('_', ' ')} "
                    f"({getattr(parent, key)!r}, not {getattr(q, key)!r})"
                )
        seen, up = {q.name}, parent
        while up is not None:
            if up.name in seen:
                raise ScenarioError(f"{where}.parent: a cycle through quota {up.name!r}")
            seen.add(up.name)
            up = quotas[index[up.parent]] if up.parent in index else None
    for q in quotas:
        children = [c for c in quotas if c.parent == q.name]
        carved = sum(c.gpus for c in children)
        if carved > q.gpus:
            first = index[children[0].name]
            raise ScenarioError(
                f"quotas[{first}].gpus: the children of {q.name!r} have {words.gpus(carved)} "
                f"together, above its {q.gpus}"
            )
