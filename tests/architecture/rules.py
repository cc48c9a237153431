"""The layout rules of ARCHITECTURE.md, read from the code itself (AST, no imports run);
the rule of writes (rule 2) is `tests/architecture/writes.py`.

Rooms, lowest first; a room may import the rooms listed for it, never one above it:

    protocol        the agent protocol's schemas: shared by console and node, owned by neither
    policy          the pure core: scheduler, fault tolerance, hang judgement, accounting,
                    forecast, admission and quota-tree rules (plain values in and out; no
                    Django, no app)
    simulator       `manage.py simulate`'s engine: a simulated clock and world over `policy`
    agents.sdk      the training SDK (imports nothing of ours)
    agents.node     the node agent program (protocol only; no Django)
    cli             the researchers' command line (talks to the API over HTTP; no Django)
    accounts        API tokens, who is calling, rate limits
    quotas          tenants, workspaces, quotas
    cluster         nodes and GPUs
    jobs            jobs, pods, lifecycle, the scheduler's shell (snapshot, cycle), admission facts
    usage           usage history: buckets, the roll-up, reports (the arithmetic is policy's)
    audit           the audit log (hears jobs' notices; mirrors the admin's history)
    notifications   webhook and e-mail notifications (an outbox fed by jobs' notices)
    agents          the agent API app: registration, heartbeats, logs, node monitor
    kube            the Kubernetes backend's controller (a peer of agents: the same
                    actions of jobs and cluster, no import of the agent API)
    quotas.admin    the quota tree's admin pages: a shell over the tree (quotas) and the
                    live workers charged to each quota (jobs); nothing imports it (the
                    tenant scoping every admin shares is `quotas.admin_scope`)
    cluster.admin   the nodes' admin pages: a shell over the inventory (cluster), the
                    workers on each node (jobs) and the re-registration consent the agents
                    app records; it lives with the model it administers, nothing imports it
    api             the researcher API (django-ninja, /api/v1/) and its JSON shapes
    web             the HTML pages, partials, template tags (a peer of api: neither imports
                    the other; both read the same rooms)
    console         the site shell: settings, URLs, Celery, loops, start-up commands
"""

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ALLOWED: dict[str, set[str]] = {
    "protocol": set(),
    "policy": {"protocol"},
    "simulator": {"policy", "protocol"},
    "agents.sdk": set(),
    "agents.node": {"protocol"},
    "cli": set(),
    "accounts": {"policy", "protocol"},
    "quotas": {"policy", "protocol"},
    "cluster": {"policy", "quotas", "protocol"},
    "jobs": {"policy", "cluster", "quotas", "accounts", "protocol"},
    "usage": {"policy", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "audit": {"policy", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "notifications": {"policy", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "agents": {"policy", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "kube": {"policy", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "quotas.admin": {"policy", "jobs", "quotas", "protocol"},
    "cluster.admin": {"agents", "policy", "jobs", "cluster", "quotas", "protocol"},
    "api": {
        "policy",
        "usage",
        "audit",
        "notifications",
        "jobs",
        "cluster",
        "quotas",
        "accounts",
        "protocol",
    },
    "web": {
        "policy",
        "usage",
        "audit",
        "notifications",
        "jobs",
        "cluster",
        "quotas",
        "accounts",
        "protocol",
    },
    "console": {
        "kube",
        "web",
        "api",
        "agents",
        "audit",
        "notifications",
        "usage",
        "jobs",
        "cluster",
        "quotas",
        "accounts",
        "simulator",
        "policy",
        "protocol",
    },
}
ROOMS = sorted(ALLOWED, key=len, reverse=True)  # longest first: agents.node before agents

# Django may not be imported by these rooms (they run without it: on GPU nodes, in jobs).
DJANGO_FREE = {"protocol", "policy", "simulator", "agents.sdk", "agents.node", "cli"}


def room_of(module: str) -> str | None:
    for room in ROOMS:
        if module == room or module.startswith(room + "."):
            return room
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> Iterator[Path]:
    """Every module of the rooms, migrations excluded (generated, and they name apps)."""
    for top in {room.split(".")[0] for room in ALLOWED}:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # what it imports
    line: int


def imports_of(path: Path) -> Iterator[Import]:
    """Top-level and function-level imports alike: a lazy import is still a dependency."""
    module = module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this package
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield Import(module, target, node.lineno)
            for alias in node.names:  # `from jobs import actions` names a module too
                yield Import(module, f"{target}.{alias.name}", node.lineno)


def layer_violations() -> list[str]:
    problems = []
    for path in source_files():
        for imp in imports_of(path):
            here, there = room_of(imp.module), room_of(imp.target)
            if here is None:
                continue
            if there is not None and there != here and there not in ALLOWED[here]:
                problems.append(f"{imp.module}:{imp.line} imports {imp.target} ({here} → {there})")
            root = imp.target.split(".")[0]
            if here in DJANGO_FREE and root in ("django", "celery", "django_htmx"):
                problems.append(f"{imp.module}:{imp.line} imports {imp.target} (no Django here)")
    return sorted(set(problems))
