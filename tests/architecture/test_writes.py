"""Rule 2 of ARCHITECTURE.md: every ORM write lives in an actions module of the app owning
the table (tests/architecture/writes.py says what the rule sees).

Each shape below is planted in a probe module and must be reported; each source's
`not_writes` must stay quiet. A line the rule must report ends with `# ← <what it says>`.
"""

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.architecture import writes
from tests.architecture.rules import ROOT, module_name

MARK = "  # ← "

SHAPES = """
from jobs.models import Job

def through_a_variable():
    waiting = Job.objects.filter(status="Pending")
    waiting.update(status="Inqueue")  # ← update (a queryset held in waiting) of jobs

def an_instance_deleted(job):
    job.delete()  # ← instance delete

def a_related_instance_saved(job):
    job.quota.save()  # ← instance save

def admin_action(modeladmin, request, queryset):
    queryset.delete()  # ← delete (a queryset held in queryset)

def a_model_form_saved(form):
    form.save()  # ← instance save

def raw(cursor):
    cursor.execute("UPDATE jobs_job SET status = 'Failed'")  # ← raw SQL write

class QuotaAdmin:
    def save_model(self, request, obj, form, change):
        update_quota(obj, actor=request.user)  # the admin calls the action: no write here

    def delete_model(self, request, obj):
        delete_quota(obj, actor=request.user)

def not_writes(form, cache, rows, request, cursor):
    form.save(commit=False)
    cache.delete("key")
    rows.update({"a": 1})
    request.session.save()
    cursor.execute("SELECT 1")
"""

# Hole 1: a write through a related manager on an instance.
RELATED = """
from jobs.models import Pod

def noted(self, job, pod: Pod, user):
    job.events.create(kind="Note")  # ← create (through job.events) of jobs
    pod.gpu_samples.update(util=0)  # ← update (through pod.gpu_samples) of jobs
    self.instance.pods.get_or_create(rank=0)  # ← get_or_create (through self.instance.pods) of jobs
    job.events.select_related("user").delete()  # ← delete of jobs
    events = job.events
    events.bulk_create([])  # ← bulk_create (a queryset held in events) of jobs
    user.registrationrecord_set.create()  # ← create (through user.registrationrecord_set) of agents

def not_writes(self, job, headers, request):
    job.events.count()
    job.events.filter(kind="Note").exists()
    self.headers.update({"a": 1})
    headers.update(status="Failed")
    request.session.update({"a": 1})
    self.cleaned_data.update(name="x")
"""

# Hole 2: a many-to-many's set, add, remove, clear.
MANY_TO_MANY = """
def bound(workspace, user, quotas):
    workspace.quotas.set(quotas)  # ← set (through workspace.quotas) of quotas
    workspace.members.remove(user)  # ← remove (through workspace.members) of quotas
    user.workspaces.add(workspace)  # ← add (through user.workspaces) of quotas
    user.groups.add(1)  # ← add (through user.groups) of accounts
    user.user_permissions.clear()  # ← clear (through user.user_permissions) of accounts

def not_writes(self, seen, stop, request_id):
    seen.add(1)
    seen.remove(1)
    seen.clear()
    self.drained.add("node-1")
    stop.set()
    self.woken.clear()
    request_id.set("abc")
"""

# Hole 3: an instance built and saved, and a model under another name.
MODELS = """
from django.apps import apps
from django.contrib.auth import get_user_model

from cluster.models import Node as Machine
from jobs import models as jm
from jobs.models import Job

Alias = jm.Pod
User = get_user_model()

def built_and_saved():
    Job(name="x").save()  # ← instance save (on Job(…)) of jobs
    job = Job(name="x")
    job.save()  # ← instance save of jobs
    Job.objects.get(pk=1).delete()  # ← delete of jobs
    Job.objects.get(pk=1).save(update_fields=[])  # ← instance save (on Job.objects.get(…)) of jobs

def aliased():
    jm.Job.objects.create(name="x")  # ← create of jobs
    Alias.objects.filter(pk=1).update(rank=0)  # ← update of jobs
    Machine.objects.create(name="n")  # ← create of cluster
    apps.get_model("cluster", "Node").objects.update(cordoned=True)  # ← update of cluster
    User.objects.create(username="x")  # ← create of accounts

def not_writes(path, image, form):
    Job(name="x").full_clean()
    form.save(commit=False)
    Path(path).unlink()
    image.save(path)  # a file written: positional arguments, not a row
    jm.Job.objects.filter(pk=1).exists()
"""

# Hole 4: a management command is a shell like a view.
COMMAND = """
from django.core.management.base import BaseCommand

from quotas.models import Tenant

class Command(BaseCommand):
    def handle(self, *args, **options):
        Tenant.objects.create(name="seed")  # ← create of quotas
"""

SOURCES = {"shapes": SHAPES, "related": RELATED, "m2m": MANY_TO_MANY, "models": MODELS}


def expected(source: str) -> dict[int, str]:
    return {
        number: line.split(MARK, 1)[1]
        for number, line in enumerate(source.splitlines(), 1)
        if MARK in line
    }


@contextmanager
def planted(path: Path, source: str) -> Iterator[str]:
    """`source` as a module at `path` for the time of the block; yields its module name."""
    path.write_text(textwrap.dedent(source))
    try:
        yield module_name(path)
    finally:
        path.unlink()


def reported(module: str) -> dict[int, str]:
    found = {}
    for problem in writes.write_violations():
        name, line, what = problem.split(":", 2)
        if name == module:
            found[int(line)] = what.strip()
    return found


@pytest.mark.parametrize("name", SOURCES)
def test_the_write_rule_sees_each_shape_and_nothing_else(name):
    source = SOURCES[name]
    assert dict(writes.orm_writes_in(source)) == expected(source)


@pytest.mark.parametrize("name", SOURCES)
def test_a_planted_write_outside_actions_is_reported(name):
    source = SOURCES[name]
    with planted(ROOT / "jobs" / f"_writes_probe_{name}.py", source) as module:
        assert reported(module) == expected(source)


def test_an_actions_module_writing_another_apps_table_is_reported():
    """Aliases and instances name their model's app: jobs' actions may write jobs' tables,
    not cluster's or accounts' (users are accounts' to write)."""
    with planted(ROOT / "jobs" / "actions" / "_writes_probe.py", MODELS) as module:
        found = reported(module)
    assert found == {
        number: f"{what} (another app's table)"
        for number, what in expected(MODELS).items()
        if not what.endswith(" of jobs")
    }


def test_a_management_command_that_writes_is_reported():
    """Commands are shells: no exemption for `management/commands/`."""
    path = ROOT / "jobs" / "management" / "commands" / "_writes_probe.py"
    with planted(path, COMMAND) as module:
        assert reported(module) == expected(COMMAND)


def test_database_writes_live_in_actions_modules():
    assert writes.write_violations() == []


def test_the_exceptions_hold_only_modules_that_still_write():
    """An exception is dropped once its module writes through actions (the demo seed does:
    console.demo calls quotas' and accounts' actions)."""
    still_writing = {
        module_name(path)
        for path in writes.source_files()
        if module_name(path) in writes.WRITE_EXCEPTIONS and any(writes.orm_writes(path))
    }
    assert set(writes.WRITE_EXCEPTIONS) == still_writing
    assert "console.demo" not in writes.WRITE_EXCEPTIONS


def test_the_relations_are_read_from_the_models():
    """The related managers the rule knows come from the models themselves, each with the
    app whose table it writes (so a new relation is covered without editing the rule)."""
    relations = writes.relations()
    assert relations["events"] == "jobs"  # JobEvent.job, related_name="events"
    assert relations["quotas"] == "quotas"  # Workspace.quotas, a many-to-many
    assert relations["devices"] == "cluster"
    assert relations["registrationrecord_set"] == "agents"  # no related_name: <model>_set
    assert relations["groups"] == "accounts"  # Django's auth: accounts writes users
    assert "+" not in relations and not any(name.endswith("+") for name in relations)
