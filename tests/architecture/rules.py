"""The layout rules of ARCHITECTURE.md, read from the code itself (AST, no imports run).

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
    jobs            jobs, pods, lifecycle, scheduler, fault tolerance, admission rules
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
    "audit": {"policy", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "notifications": {"policy", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "agents": {"policy", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "kube": {"policy", "jobs", "cluster", "quotas", "accounts", "protocol"},
    "quotas.admin": {"policy", "jobs", "quotas", "protocol"},
    "cluster.admin": {"agents", "policy", "jobs", "cluster", "quotas", "protocol"},
    "api": {
        "policy",
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


def _is_queryset_annotation(node: ast.expr | None) -> bool:
    text = ast.unparse(node) if node is not None else ""
    return "QuerySet" in text or "Manager" in text


def orm_names(tree: ast.Module) -> set[str]:
    """Names that hold a manager or queryset somewhere in the module: bound from an ORM
    chain (`waiting = Job.objects.filter(…)`), or parameters called `queryset` (the
    admin's actions) or annotated as one."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _chain_is_orm(node.value) or (
                isinstance(node, ast.AnnAssign) and _is_queryset_annotation(node.annotation)
            ):
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.arg) and (
            node.arg == "queryset" or _is_queryset_annotation(node.annotation)
        ):
            names.add(node.arg)
    return names


def _is_instance(node: ast.expr) -> bool:
    """A plain name or attribute chain (`job`, `pod.job`, `self.instance`): what holds a
    model instance, as opposed to a call's result."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _is_unsaved_form_save(call: ast.Call) -> bool:
    """`form.save(commit=False)` builds instances without writing them."""
    return any(
        k.arg == "commit" and isinstance(k.value, ast.Constant) and k.value.value is False
        for k in call.keywords
    )


def _raw_sql_write(call: ast.Call) -> bool:
    sql = call.args[0]
    text = ""
    if isinstance(sql, ast.Constant) and isinstance(sql.value, str):
        text = sql.value
    elif isinstance(sql, ast.JoinedStr):
        text = "".join(v.value for v in sql.values if isinstance(v, ast.Constant))
    return text.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))


def write_shape(node: ast.Call, querysets: set[str]) -> str | None:
    """What kind of ORM write the call is, or None. The shapes: a manager's or queryset's
    write (`Job.objects.filter(…).update(…)`, also through a variable holding the
    queryset), an instance saved or deleted (`job.save()`, `job.quota.save()`,
    `pod.delete()`), and raw SQL that writes."""
    if not isinstance(node.func, ast.Attribute):
        return None
    name, receiver = node.func.attr, node.func.value
    if name in WRITE_METHODS and _chain_is_orm(receiver):
        return name
    if name in WRITE_METHODS and isinstance(receiver, ast.Name) and receiver.id in querysets:
        return f"{name} (a queryset held in {receiver.id})"
    instance_write = name in ("save", "delete") and not node.args and _is_instance(receiver)
    if instance_write and not _is_unsaved_form_save(node):
        return f"instance {name}"  # a model instance saved or deleted
    if name == "execute" and node.args and _raw_sql_write(node):
        return "raw SQL write"
    return None


def orm_writes_in(source: str, filename: str = "<probe>") -> Iterator[tuple[int, str]]:
    """(line, what) of each ORM write; `what` names the model's app when it is known."""
    tree = ast.parse(source, filename=filename)
    owners = model_apps(tree)
    querysets = orm_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        what = write_shape(node, querysets)
        if what is None:
            continue
        owner = None
        if what in WRITE_METHODS:
            owner = owners.get(_root_name(node.func.value) or "")
        yield node.lineno, f"{what} of {owner}" if owner else what


def orm_writes(path: Path) -> Iterator[tuple[int, str]]:
    return orm_writes_in(path.read_text(), filename=str(path))


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
