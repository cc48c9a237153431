"""Rule 2 of ARCHITECTURE.md, read from the code itself (AST, no imports run): every ORM
write lives in an `actions` module, and an app's actions write only that app's tables.

What the rule sees as a write (`write_shape`):
- a manager's or queryset's write (`create`, `update`, `delete`, `bulk_create`, …) on
  `X.objects…` or a queryset chain (`….filter(…)…`), also through a name bound to one, a
  parameter called `queryset` (the admin's actions) or annotated as a QuerySet or Manager;
- a related manager's write (`job.events.create(…)`, `pod.gpu_samples.update(…)`) and a
  many-to-many's `set`, `add`, `remove`, `clear` (`workspace.quotas.set(…)`,
  `user.groups.add(…)`): an attribute named like a relation, read from the models (each
  many-to-many field, each `related_name`, `<model>_set` where none is given) and Django's
  auth (`groups`, `user_permissions`, `permissions`);
- an instance saved or deleted: `save()` or `delete()` without positional arguments on a
  name, an attribute (`job.quota.save()`) or a call's result (`Job(…).save()`,
  `Job.objects.get(…).delete()`); `save(commit=False)` (a form's unsaved instance) and
  `request.session.save()` (the session framework's store) are none;
- raw SQL that writes (`cursor.execute("INSERT …")`, also `UPDATE` and `DELETE`).
Every module of the console's rooms is read: views, tasks, the admin, management commands
and seed data alike (`WRITE_EXCEPTIONS` is empty). Relations are known by name: a plain
value called like one (`self.events.add(…)` on a set) would be reported; name it otherwise.

Whose table a write touches is known when the model is: imported from a models module
(also as an alias: `import … as`, `from jobs import models as m`, `M = Job`,
`apps.get_model("jobs", "Job")`, `get_user_model()`), bound to a name from a model call
or a manager (`job = Job(…)`, `waiting = Job.objects.filter(…)`), a parameter annotated
with a model (`job: Job`, `pods: QuerySet[Pod]`), or a relation one app declares. An
actions module that writes another app's table is reported; Django's auth tables are
`accounts`' (`ADOPTED`).
"""

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.architecture.rules import DJANGO_FREE, module_name, room_of, source_files

WRITE_METHODS = {
    "update",
    "create",
    "bulk_create",
    "bulk_update",
    "delete",
    "get_or_create",
    "update_or_create",
}
# What a related manager adds: a many-to-many's (and a nullable reverse key's) writes.
RELATED_WRITE_METHODS = WRITE_METHODS | {"add", "set", "remove", "clear"}
QUERYSET_METHODS = {
    "filter",
    "exclude",
    "select_for_update",
    "select_related",
    "prefetch_related",
    "all",
    "using",
    "order_by",
}
# Django's auth tables (users, groups, permissions) are `accounts`' to write: its actions
# write them, and so would any other app's only through them. Their related managers:
# User.groups, User.user_permissions, Group.permissions.
AUTH_OWNER = "accounts"
ADOPTED = {"django.contrib.auth": AUTH_OWNER, "auth": AUTH_OWNER}  # module or app label
DJANGO_RELATIONS = {"groups": AUTH_OWNER, "user_permissions": AUTH_OWNER, "permissions": AUTH_OWNER}

# Modules allowed to write outside an `actions` module, and why: a module being moved by
# another branch goes here as `"module": "being moved by <who>"` until that branch merges
# (`test_the_exceptions_hold_only_modules_that_still_write` drops what no longer writes).
WRITE_EXCEPTIONS: dict[str, str] = {}


# -- what the models declare ---------------------------------------------------------------


def _model_modules() -> Iterator[tuple[str, ast.Module]]:
    for path in source_files():
        module = module_name(path)
        if room_of(module) not in DJANGO_FREE and (
            path.stem == "models" or path.stem.endswith("_models")
        ):
            yield module, ast.parse(path.read_text(), filename=str(path))


def _field_kind(value: ast.expr) -> str | None:
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in ("ForeignKey", "ManyToManyField", "OneToOneField"):
            return name
    return None


def _related_name(call: ast.Call) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == "related_name" and isinstance(keyword.value, ast.Constant):
            return keyword.value.value
    return None


def _declared_relations(cls: ast.ClassDef) -> Iterator[str]:
    """The related managers a model's fields create: a many-to-many's forward name, and
    the reverse side of a foreign key or many-to-many (`related_name`, else `<model>_set`;
    `+` is none). A one-to-one's reverse side is an instance, not a manager."""
    for stmt in cls.body:
        if not isinstance(stmt, ast.Assign) or not isinstance(stmt.targets[0], ast.Name):
            continue
        kind = _field_kind(stmt.value)
        if kind is None:
            continue
        if kind == "ManyToManyField":
            yield stmt.targets[0].id
        if kind == "OneToOneField":
            continue
        reverse = _related_name(stmt.value) or f"{cls.name.lower()}_set"
        if not reverse.endswith("+"):
            yield reverse


@cache
def relations() -> dict[str, str | None]:
    """Each related manager's name → the app owning the table it writes (None when two
    apps declare the same name)."""
    found: dict[str, str | None] = dict(DJANGO_RELATIONS)
    for module, tree in _model_modules():
        app = module.split(".")[0]
        for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
            for name in _declared_relations(cls):
                found[name] = app if found.get(name, app) == app else None
    return found


# -- whose table ---------------------------------------------------------------------------


def _app_of_models_module(module: str) -> str | None:
    """`jobs.models` → jobs, `jobs.usage_models` → jobs, `django.contrib.auth.models` →
    accounts (`ADOPTED`); None for a module that holds no models (`django.db.models` is
    the ORM itself)."""
    if module.split(".")[:2] == ["django", "db"]:
        return None
    head, _, last = module.rpartition(".")
    if last == "models":
        return ADOPTED.get(head, head)
    return module.split(".")[0] if last.endswith("_models") else None


def _model_call_owner(node: ast.expr) -> str | None:
    """The app of a call that returns a model class: `apps.get_model("jobs", "Job")`,
    `get_user_model()`."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name == "get_user_model":
        return AUTH_OWNER  # settings.AUTH_USER_MODEL is Django's own user
    if name == "get_model" and node.args and isinstance(node.args[0], ast.Constant):
        label = str(node.args[0].value).split(".")[0]  # "jobs", "Job" or "jobs.Job"
        return ADOPTED.get(label, label)
    return None


def model_apps(tree: ast.Module) -> dict[str, str]:
    """Names in this module that stand for a model class, or a models module, → the app
    that owns the model's table."""
    owners: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            app = _app_of_models_module(node.module)
            for alias in node.names:
                local = alias.asname or alias.name
                if app and alias.name != "*":
                    owners[local] = app
                elif node.module != "django.db" and (
                    alias.name == "models" or alias.name.endswith("_models")
                ):
                    owners[local] = node.module.split(".")[0]  # `from jobs import models`
        elif isinstance(node, ast.Import):
            for alias in node.names:
                app = _app_of_models_module(alias.name)
                if app:
                    owners[alias.asname or alias.name] = app
    for node in ast.walk(tree):  # aliases: `M = Job`, `M = m.Job`, `User = get_user_model()`
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value, target = node.value, node.targets[0].id
            if isinstance(value, ast.Attribute) and value.attr[:1].isupper():
                value = value.value  # `m.Job`: the models module's app
            if isinstance(value, ast.Name) and value.id in owners:
                owners[target] = owners[value.id]
            elif owner := _model_call_owner(value):
                owners[target] = owner
    return owners


def bound_owners(tree: ast.Module, owners: dict[str, str]) -> dict[str, str]:
    """Names bound to an instance or a queryset of a known app's model: from a model call
    (`job = Job(…)`, `job = Job.objects.get(…)`), a manager chain (`waiting =
    Job.objects.filter(…)`), or a parameter annotated with a model (`job: Job`,
    `job: Job | None`, `pods: QuerySet[Pod]`)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call | ast.Attribute):
            value = node.value
            owner = (_called_model(value, owners) if isinstance(value, ast.Call) else None) or (
                _manager_owner(value, owners, {}) if _chain_is_orm(value) else None
            )
            if owner:
                bound |= {t.id: owner for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.arg) and node.annotation is not None:
            named = {
                owners[n.id]
                for n in ast.walk(node.annotation)
                if isinstance(n, ast.Name) and n.id in owners
            }
            if len(named) == 1:
                bound[node.arg] = named.pop()
    return bound


def _called_model(call: ast.Call, owners: dict[str, str]) -> str | None:
    """The app of `Job(…)`, `models.Job(…)`, `Job.objects.get(…)` (a model instance)."""
    func = call.func
    if isinstance(func, ast.Name):
        return owners.get(func.id)
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id in owners and func.attr[:1].isupper():
            return owners[func.value.id]  # models.Job(…)
        if func.attr in ("get", "create", "first", "last", "select_for_update"):
            return _manager_owner(func.value, owners, {})
    return None


def _manager_owner(node: ast.expr, owners: dict[str, str], bound: dict[str, str]) -> str | None:
    """The app of the table a manager or queryset chain reads or writes: `Job.objects…`,
    `m.Job.objects…`, `job.events…` (the relation's declarer), a name bound to a queryset,
    through queryset calls."""
    related = relations()
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value  # a queryset method: what it is called on
        elif isinstance(node, ast.Attribute) and node.attr == "objects":
            model = node.value
            if isinstance(model, ast.Name):
                return owners.get(model.id)
            if isinstance(model, ast.Attribute) and isinstance(model.value, ast.Name):
                return owners.get(model.value.id)  # `models.Job.objects`
            return _model_call_owner(model)  # `get_user_model().objects`
        elif isinstance(node, ast.Attribute) and node.attr in related:
            return related[node.attr]
        elif isinstance(node, ast.Name):
            return bound.get(node.id)
        else:
            return None


# -- what is a write -----------------------------------------------------------------------


def _chain_is_orm(node: ast.expr) -> bool:
    """Whether a call's receiver is a manager or queryset: `X.objects…`, `….filter(…)…`,
    or a related manager such as `job.events`."""
    related = relations()
    while True:
        if isinstance(node, ast.Attribute):
            if node.attr == "objects" or node.attr in related:
                return True
            node = node.value
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in QUERYSET_METHODS:
                return True
            node = func
        else:
            return False


def _is_related_manager(node: ast.expr) -> bool:
    """`job.events`, `self.instance.quotas`: a relation's name on an instance."""
    return isinstance(node, ast.Attribute) and node.attr in relations()


def _is_queryset_annotation(node: ast.expr | None) -> bool:
    text = ast.unparse(node) if node is not None else ""
    return "QuerySet" in text or "Manager" in text


def orm_names(tree: ast.Module) -> set[str]:
    """Names that hold a manager or queryset somewhere in the module: bound from an ORM
    chain (`waiting = Job.objects.filter(…)`, `events = job.events`), or parameters called
    `queryset` (the admin's actions) or annotated as one."""
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


def _unwritten(call: ast.Call) -> bool:
    """A `save()` that writes no table of ours: `form.save(commit=False)` builds instances
    without writing them; `request.session.save()` is the session framework's store."""
    receiver = call.func.value
    return (isinstance(receiver, ast.Attribute) and receiver.attr == "session") or any(
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
    """What kind of ORM write the call is, or None (the shapes: the module's docstring)."""
    if not isinstance(node.func, ast.Attribute):
        return None
    name, receiver = node.func.attr, node.func.value
    if name in RELATED_WRITE_METHODS and _is_related_manager(receiver):
        return f"{name} (through {ast.unparse(receiver)})"  # a related manager
    if name in WRITE_METHODS and _chain_is_orm(receiver):
        return name
    if name in WRITE_METHODS and isinstance(receiver, ast.Name) and receiver.id in querysets:
        return f"{name} (a queryset held in {receiver.id})"
    if name in ("save", "delete") and not node.args and not _unwritten(node):
        if isinstance(receiver, ast.Call):
            return f"instance {name} (on {ast.unparse(receiver.func)}(…))"  # a call's result
        return f"instance {name}"  # a model instance saved or deleted
    if name == "execute" and node.args and _raw_sql_write(node):
        return "raw SQL write"
    return None


def _owner(node: ast.Call, owners: dict[str, str], bound: dict[str, str]) -> str | None:
    receiver = node.func.value
    if node.func.attr in ("save", "delete") and not _chain_is_orm(receiver):
        if isinstance(receiver, ast.Name):
            return bound.get(receiver.id)
        if isinstance(receiver, ast.Call):
            return _called_model(receiver, owners)
        return None
    return _manager_owner(receiver, owners, bound)


def orm_writes_in(source: str, filename: str = "<probe>") -> Iterator[tuple[int, str]]:
    """(line, what) of each ORM write; `what` ends with "of <app>" when the table's owner is
    known."""
    tree = ast.parse(source, filename=filename)
    owners = model_apps(tree)
    bound = bound_owners(tree, owners)
    querysets = orm_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        what = write_shape(node, querysets)
        if what is None:
            continue
        owner = _owner(node, owners, bound) if what != "raw SQL write" else None
        yield node.lineno, f"{what} of {owner}" if owner else what


def orm_writes(path: Path) -> Iterator[tuple[int, str]]:
    return orm_writes_in(path.read_text(), filename=str(path))


def is_actions_module(module: str) -> bool:
    return ".actions" in f".{module}" and (module.endswith(".actions") or ".actions." in module)


def write_violations() -> list[str]:
    """ORM writes outside `actions` modules (views, tasks, admin, management commands
    alike), and actions writing another app's tables."""
    problems = []
    for path in source_files():
        module = module_name(path)
        if room_of(module) in DJANGO_FREE or module in WRITE_EXCEPTIONS:
            continue
        app = module.split(".")[0]
        for line, what in orm_writes(path):
            if not is_actions_module(module):
                problems.append(f"{module}:{line}: {what}")
            elif " of " in what and what.rsplit(" of ", 1)[1] != app:
                problems.append(f"{module}:{line}: {what} (another app's table)")
    return problems
