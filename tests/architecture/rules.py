"""The layout rules of ARCHITECTURE.md, read from the code itself (AST, no imports run).

Rooms, lowest first; a room may import the rooms listed for it, never one above it:

    protocol        the agent protocol's schemas: shared by console and node, owned by neither
    agents.sdk      the training SDK (imports nothing of ours)
    agents.node     the node agent program (protocol only; no Django)
    cli             the researchers' command line (talks to the API over HTTP; no Django)
    accounts        API tokens, who is calling, rate limits
    quotas          tenants, workspaces, quotas
    cluster         nodes and GPUs
    jobs            jobs, pods, lifecycle, scheduler, fault tolerance, admission rules
    audit           the audit log (hears jobs' notices; mirrors the admin's history)
    notifications   webhook and e-mail notifications (an outbox fed by jobs' notices)
    agents          the agent API app: registration, heartbeats, logs, node monitor
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
    "agents.sdk": set(),
    "agents.node": {"protocol"},
    "cli": set(),
    "accounts": {"protocol"},
    "quotas": {"protocol"},
    "cluster": {"quotas", "protocol"},
    "jobs": {"cluster", "quotas", "accounts", "protocol"},
    "audit": {"jobs", "cluster", "quotas", "accounts", "protocol"},
    "notifications": {"jobs", "cluster", "quotas", "accounts", "protocol"},
    "agents": {"jobs", "cluster", "quotas", "accounts", "protocol"},
    "api": {"audit", "notifications", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "web": {"audit", "notifications", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "console": {
        "web",
        "api",
        "agents",
        "audit",
        "notifications",
        "jobs",
        "cluster",
        "quotas",
        "accounts",
        "protocol",
    },
}
ROOMS = sorted(ALLOWED, key=len, reverse=True)  # longest first: agents.node before agents

# Django may not be imported by these rooms (they run without it: on GPU nodes, in jobs).
DJANGO_FREE = {"protocol", "agents.sdk", "agents.node", "cli"}


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


# -- writes -------------------------------------------------------------------------------

WRITE_METHODS = {
    "update",
    "create",
    "bulk_create",
    "bulk_update",
    "delete",
    "get_or_create",
    "update_or_create",
}
QUERYSET_METHODS = {"filter", "exclude", "select_for_update", "all", "using", "order_by"}
# Modules allowed to write outside an `actions` module, and why.
WRITE_EXCEPTIONS = {
    "console.demo": "seed data of the embedded console (creates the demo tenant and users)",
}


def _chain_is_orm(node: ast.expr) -> bool:
    """Whether a call's receiver is a manager or queryset: `X.objects…`, `….filter(…)…`,
    or a related manager such as `job.events`."""
    while True:
        if isinstance(node, ast.Attribute):
            if node.attr == "objects":
                return True
            node = node.value
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in QUERYSET_METHODS:
                return True
            node = func
        else:
            return False


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def model_apps(tree: ast.Module) -> dict[str, str]:
    """Names imported from `<app>.models` in this module → the app that owns them."""
    owners = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(".models"):
            for alias in node.names:
                owners[alias.asname or alias.name] = node.module.rsplit(".", 1)[0]
    return owners


def orm_writes(path: Path) -> Iterator[tuple[int, str]]:
    """(line, what) of each ORM write; `what` names the model's app when it is known."""
    tree = ast.parse(path.read_text(), filename=str(path))
    owners = model_apps(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        if name in WRITE_METHODS and _chain_is_orm(node.func.value):
            owner = owners.get(_root_name(node.func.value) or "")
            yield node.lineno, f"{name} of {owner}" if owner else name
        elif name == "save" and not node.args and isinstance(node.func.value, ast.Name):
            yield node.lineno, "save"  # a model instance saved
        elif name == "execute" and node.args:
            sql = node.args[0]
            text = ""
            if isinstance(sql, ast.Constant) and isinstance(sql.value, str):
                text = sql.value
            elif isinstance(sql, ast.JoinedStr):
                text = "".join(v.value for v in sql.values if isinstance(v, ast.Constant))
            if text.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
                yield node.lineno, "raw SQL write"


def is_actions_module(module: str) -> bool:
    return ".actions" in f".{module}" and (module.endswith(".actions") or ".actions." in module)


def write_violations() -> list[str]:
    """ORM writes outside `actions` modules, and actions writing another app's tables."""
    problems = []
    for path in source_files():
        module = module_name(path)
        if room_of(module) in DJANGO_FREE or module in WRITE_EXCEPTIONS:
            continue
        if path.parent.name == "commands":
            continue  # management commands are shells: they call actions, or seed data
        app = module.split(".")[0]
        for line, what in orm_writes(path):
            if not is_actions_module(module):
                problems.append(f"{module}:{line}: {what}")
            elif " of " in what and what.rsplit(" of ", 1)[1] != app:
                problems.append(f"{module}:{line}: {what} (another app's table)")
    return problems
