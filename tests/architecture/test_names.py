"""Names agree with what they name: a model's table and its admin belong to the model's app,
the web app's templates sit in its own folder and every template the code names exists, the
job pages' URL namespace is the web app's (ARCHITECTURE.md, "Rooms")."""

import re
import subprocess

from django.apps import apps
from django.contrib import admin
from django.template import TemplateDoesNotExist
from django.template.loader import get_template
from django.urls import reverse

from tests.architecture.rules import ALLOWED, ROOT

OUR_APPS = {room for room in ALLOWED if "." not in room}


def our_models() -> list:
    return [m for m in apps.get_models() if m._meta.app_label in OUR_APPS]


def test_each_table_is_named_for_the_app_of_its_model():
    """`<app>_<model>`, Django's default: no table keeps the name of an app it left."""
    misnamed = [
        f"{m._meta.label}: {m._meta.db_table}"
        for m in our_models()
        if m._meta.db_table != f"{m._meta.app_label}_{m._meta.model_name}"
    ]
    assert misnamed == []


def test_each_model_is_administered_from_its_own_app():
    assert our_models()
    elsewhere = [
        f"{model._meta.label} by {type(model_admin).__module__}"
        for model, model_admin in admin.site._registry.items()
        if model._meta.app_label in OUR_APPS
        and type(model_admin).__module__ != f"{model._meta.app_label}.admin"
    ]
    assert elsewhere == []


ERROR_PAGES = ("templates/404.html", "templates/500.html")  # Django looks them up by name


def stray_templates() -> list[str]:
    """Templates outside the folders that may hold them: an app's own (`web/templates/web/`),
    and at the top (`templates/`) only the admin's overrides and the error pages."""
    stray = []
    for path in sorted(ROOT.glob("templates/**/*.html")):
        name = path.relative_to(ROOT).as_posix()
        if not name.startswith("templates/admin/") and name not in ERROR_PAGES:
            stray.append(name)
    for path in sorted(ROOT.glob("*/templates/**/*.html")):
        app, _, first, *_ = path.relative_to(ROOT).parts
        if first != app:  # <app>/templates/<app>/…
            stray.append(path.relative_to(ROOT).as_posix())
    return stray


def test_templates_sit_in_the_folder_of_their_app():
    assert stray_templates() == []


# A template name as code and templates write it: "web/jobs/list.html", "….html#rows".
_NAMED = re.compile(r"""["']([\w/.-]+\.html)(?:#[\w-]+)?["']""")


def named_templates(text: str) -> set[str]:
    return set(_NAMED.findall(text))


def test_every_template_the_code_names_exists():
    sources = [
        *ROOT.glob("web/**/*.py"),
        *ROOT.glob("*/admin.py"),
        *ROOT.glob("web/templates/**/*.html"),
        *ROOT.glob("templates/**/*.html"),
    ]
    named = {name for path in sources for name in named_templates(path.read_text())}
    assert len(named) > 20
    assert missing_templates(named) == []


def missing_templates(names: set[str]) -> list[str]:
    missing = []
    for name in sorted(names):
        try:
            get_template(name)
        except TemplateDoesNotExist:
            missing.append(name)
    return missing


def test_the_checks_catch_a_stray_or_missing_template():
    assert named_templates('{% include "jobs/_badge.html" %} render(r, "web/a.html#rows")') == {
        "jobs/_badge.html",
        "web/a.html",
    }
    assert missing_templates({"jobs/_badge.html", "web/_badge.html"}) == ["jobs/_badge.html"]
    probes = [ROOT / "web" / "templates" / "_names_probe.html", ROOT / "templates" / "_probe.html"]
    for probe in probes:
        probe.write_text("probe")
    try:
        assert stray_templates() == ["templates/_probe.html", "web/templates/_names_probe.html"]
    finally:
        for probe in probes:
            probe.unlink()


def test_the_job_pages_are_in_the_web_namespace():
    assert reverse("web:list") == "/jobs/"
    assert reverse("web:detail", args=[7]) == "/jobs/7/"


def old_namespace_uses(text: str) -> list[int]:
    """Lines naming a URL in the namespace the job pages had before (`jobs:`)."""
    return [n for n, line in enumerate(text.splitlines(), 1) if re.search(r"""["']jobs:""", line)]


def test_nothing_names_the_old_namespace():
    listed = subprocess.run(
        ["git", "ls-files", "*.py", "*.html", "*.md", "*.js"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for name in listed:
        if (ROOT / name).is_file():
            found += [f"{name}:{n}" for n in old_namespace_uses((ROOT / name).read_text())]
    assert found == []
    assert old_namespace_uses("{% url 'jo" + "bs:detail' job.pk %}") == [1]
    assert old_namespace_uses('reverse("jo' + 'bs:list")') == [1]
