"""The job's shape is written once (policy.jobspec, docs/job-shape.md): every boundary that
takes, stores, shows or carries a job's fields agrees with it, and a new field is one entry
there plus its column."""

import argparse
import os
import subprocess
import sys
import textwrap

from django.core.exceptions import FieldDoesNotExist
from django.db import models

from api import schemas
from cli import submit as cli_submit
from jobs.models import Job
from policy import jobspec
from policy.faulttolerance.policy import FtConfig
from policy.jobspec import FIELD, FIELDS, JobSpec, Kind
from protocol.agent import JobRunSpec
from tests.architecture.rules import ROOT
from web.forms import JobForm

NAMES = [f.name for f in FIELDS]


def test_every_field_is_on_the_create_page_once():
    shown = [name for _, names in jobspec.PAGE for name in names]
    assert sorted(shown) == sorted(NAMES)
    for title, names in jobspec.PAGE:
        assert {FIELD[name].section for name in names} == {title}


def test_the_form_is_the_shape():
    fields = JobForm.base_fields
    assert list(fields) == NAMES
    for described in FIELDS:
        field = fields[described.name]
        assert (field.label, field.required) == (described.label, described.required)
        assert field.help_text == described.help
        if described.kind is Kind.INT:
            low, high = described.bounds
            assert field.widget.attrs == {"min": low, "max": high}
            assert field.initial == described.default
        if described.kind is Kind.TEXT:
            assert field.max_length == described.max_length
        if described.kind is Kind.CHOICE:
            assert [value for value, _ in field.choices] == [c.value for c in described.choices]
            assert field.initial == described.default.value


def _member(prop: dict, json_type: str) -> dict:
    """The member of a property's schema for one JSON type (its limits are there, not
    beside the null an optional field may be)."""
    (member,) = [m for m in prop.get("anyOf", [prop]) if m.get("type") == json_type]
    return member


def test_the_api_takes_and_shows_the_shape(client, db):
    document = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    create = document["JobCreate"]
    assert list(create["properties"]) == NAMES
    assert create["required"] == [f.name for f in FIELDS if f.required]
    for described in jobspec.fields_by_kind(Kind.INT):
        low, high = described.bounds
        prop = _member(create["properties"][described.name], "integer")
        assert (prop["minimum"], prop["maximum"]) == (low, high)
    for described in jobspec.fields_by_kind(Kind.CHOICE):
        prop = _member(create["properties"][described.name], "string")
        assert prop["enum"] == [c.value for c in described.choices]
    for described in jobspec.fields_by_kind(Kind.TEXT):
        prop = _member(create["properties"][described.name], "string")
        assert prop.get("maxLength") == described.max_length
        assert (described.pattern or "") in prop["pattern"]
    shown = {f.shown.partition(".")[0] for f in FIELDS if f.shown}
    assert shown <= set(document["Job"]["properties"])
    for group, members in jobspec.shown_groups().items():
        title = schemas.GROUPS[group].__name__
        assert list(document[title]["properties"]) == [f.shown.partition(".")[2] for f in members]


def _column_problems(model=Job) -> list[str]:
    """A stored field whose column is missing, or whose column disagrees with it."""
    problems = []
    for described in FIELDS:
        if described.stored is None:
            continue
        column, _, key = described.stored.partition(".")
        try:
            field = model._meta.get_field(column)
        except FieldDoesNotExist:
            problems.append(f"{described.name}: no column {column}")
            continue
        if key or described.kind is Kind.ENV:
            if not isinstance(field, models.JSONField):
                problems.append(f"{described.name}: {column} is not a JSON column")
            continue
        text = described.kind is Kind.TEXT and field.max_length is not None
        if text and field.max_length != described.max_length:
            problems.append(f"{described.name}: {column} holds {field.max_length} characters")
        if field.has_default() and field.get_default() != described.default:
            problems.append(f"{described.name}: {column} defaults to {field.get_default()!r}")
    return problems


def test_each_stored_field_has_its_column():
    assert _column_problems() == []
    assert set(JobSpec.__dataclass_fields__) <= {f.name for f in Job._meta.get_fields()}


def test_fault_tolerance_reads_the_keys_and_defaults_the_shape_writes():
    stored = {f.stored.partition(".")[2]: f for f in FIELDS if (f.stored or "").startswith("ft_")}
    defaults = FtConfig().to_dict()
    assert list(defaults) == list(stored)
    for key, described in stored.items():
        default = described.default
        assert defaults[key] == (default.value if described.kind is Kind.CHOICE else default)


def test_worker_specs_carry_what_the_protocol_takes():
    assert {f.worker for f in FIELDS if f.worker} == set(JobRunSpec.model_fields)


def test_the_command_line_names_the_shape():
    """The CLI imports nothing of ours: its flags are checked against the shape here."""
    parser = argparse.ArgumentParser()
    cli_submit.add_arguments(parser)
    assert set(cli_submit.FLAG_FIELDS.values()) <= set(NAMES)
    choices = {action.dest: action.choices for action in parser._actions if action.choices}
    for dest, name in cli_submit.FLAG_FIELDS.items():
        if dest in choices:
            assert list(choices[dest]) == [c.value for c in FIELD[name].choices], dest


GOOD = {"quota": "q", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": "train"}


def test_json_in_and_out():
    spec, problems = JobSpec.from_json(GOOD | {"env": "A=1", "run_type": "Asynchronous"})
    assert problems == {}
    assert (spec.name, spec.env) == ("pytorch", {"A": "1"})
    assert spec.ft_config["run_type"] == "Asynchronous"
    again, _ = JobSpec.from_json({"quota": "q", **spec.to_fields()})
    assert again == spec
    shown = spec.to_json()
    assert shown["fault_tolerance"]["enabled"] is False
    assert shown["fault_tolerance"]["policy"] == "ExitCodeAndErrorMsg"
    assert spec.worker_fields()["checkpoint_subdir"] == ""
    assert JobSpec.from_json(GOOD | {"workers": 0})[1] == {
        "workers": ["Workers must be between 1 and 64."]
    }


# -- a new field is one entry ----------------------------------------------------------------

NEW_FIELD = """
    JobField(
        "run_label", Kind.TEXT, "Run label", section=ADVANCED, default="",
        max_length=limits.JOB_NAME, help="Shown with the run.", doc="A label for the run.",
    ),
"""
PROBE = """
import sys, types

source = open("policy/jobspec.py").read()
end = source.index("\\n)\\n# fmt: on")
module = types.ModuleType("policy.jobspec")
module.__file__ = "policy/jobspec.py"
sys.modules["policy.jobspec"] = module
exec(compile(source[:end] + NEW_FIELD + source[end:], module.__file__, "exec"), module.__dict__)

import django

django.setup()
import policy

policy.jobspec = module
from api import schemas
from policy.jobspec import JobSpec, clean, fields_of_job
from tests.architecture.test_job_shape import _column_problems
from web import views_create
from web.forms import JobForm

form = JobForm(user=None)
assert form.fields["run_label"].label == "Run label", "the form"
assert form.fields["run_label"].max_length == 200
assert views_create._PAGE["Advanced"][-1] == "run_label", "the page"
assert "run_label" in schemas.JobCreate.model_fields, "the API's request"
documented = schemas.JobCreate.model_json_schema()["properties"]["run_label"]["anyOf"][0]
assert documented["maxLength"] == 200, "the API document's limits"
assert "maxlength" not in str(form["run_label"]), "the page's input never cuts a paste"
assert "run_label" in schemas.Job.model_fields, "the API's response"
assert JobSpec(name="n", image="i", command="c").run_label == "", "the spec"
too_long = "Ensure this value has at most 200 characters (it has 201)."
assert clean({"run_label": "x" * 201})[1]["run_label"] == [too_long], "the rules"
spec = JobSpec.from_json({"quota": "q", "image": "i", "command": "c", "run_label": "r"})[0]
assert spec.to_json()["run_label"] == "r", "the API's JSON"
assert spec.columns()["run_label"] == "r", "the row"
assert _column_problems() == ["run_label: no column run_label"], "the model column is missing"
print("ok")
"""


def test_a_new_field_is_one_entry_plus_its_column():
    """One JobField added to FIELDS (and nothing else) reaches the form, the page, the API's
    request and response, the spec, the rules and the JSON; only the column is missing."""
    probe = f"NEW_FIELD = {NEW_FIELD!r}\n" + PROBE
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(probe)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings_test"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
