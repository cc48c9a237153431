"""The Create job page's form: the fields as the page shows them (labels, widgets, help,
bounds as input attributes), built from the job's shape (`policy.jobspec.FIELDS`, one
`form_field` per kind) and checked by `jobs.admission` (the API's rules too: one set).

The fields only render: `full_clean` hands the submitted values to
`jobs.admission.facts.check_job` and copies its problems onto the fields, so the page says
what the API says. A text's input has no `maxlength` (a browser would cut a longer paste
without a word): a text too long gets the API's field error. Nothing is written until it is
valid, and then only through `jobs.actions.submit.create_job`.
"""

from typing import Any

from django import forms
from django.forms.utils import ErrorDict
from django.utils.choices import CallableChoiceIterator
from django.utils.functional import cached_property

from jobs.actions.submit import create_job
from jobs.admission.facts import Checked, check_job, member_workspaces
from jobs.models import Job
from policy import jobspec
from policy.admission import rules
from policy.jobspec import JobField, JobSpec, Kind
from quotas.models import Quota, Workspace

# The form's values that clone an existing job (clone, restart).
initial_from_job = jobspec.fields_of_job


class EnvField(forms.Field):
    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return "\n".join(f"{key}={val}" for key, val in value.items())
        return value


class TextField(forms.CharField):
    """A text of the job's shape: its `max_length` is the rules' limit, never the input's
    `maxlength` (with which a browser silently cuts what is pasted into it)."""

    def widget_attrs(self, widget: forms.Widget) -> dict[str, Any]:
        attrs = super().widget_attrs(widget)
        attrs.pop("maxlength", None)
        return attrs


def _text_area(described: JobField) -> forms.Textarea:
    attrs: dict[str, Any] = {"rows": described.rows}
    if described.placeholder:
        attrs["placeholder"] = described.placeholder
    return forms.Textarea(attrs=attrs)


def form_field(described: JobField) -> forms.Field:
    """The page's field for one field of the job's shape: its label, help, widget and the
    bounds the browser shows (the rules check them: the field itself only renders)."""
    common = {"label": described.label, "required": described.required}
    if described.help:
        common["help_text"] = described.help
    if described.kind is Kind.REF:
        return forms.CharField(widget=forms.Select, **common)
    if described.kind is Kind.TEXT:
        widget = _text_area(described) if described.rows else None
        return TextField(max_length=described.max_length, widget=widget, **common)
    if described.kind is Kind.INT:
        low, high = described.bounds
        widget = forms.NumberInput(attrs={"min": low, "max": high})
        return forms.IntegerField(initial=described.default, widget=widget, **common)
    if described.kind is Kind.CHOICE:
        choices = [(v.value, v.value) for v in described.choices]
        return forms.ChoiceField(choices=choices, initial=described.default.value, **common)
    if described.kind is Kind.FLAG:
        return forms.BooleanField(**common)
    return EnvField(widget=_text_area(described), **common)


# The fields of the job's shape (policy.jobspec.FIELDS), in its order.
JobFields = type("JobFields", (forms.Form,), {f.name: form_field(f) for f in jobspec.FIELDS})


class JobForm(JobFields):
    def __init__(self, data=None, *, user, **kwargs) -> None:
        super().__init__(data, **kwargs)
        self.user = user
        self.workspace_obj: Workspace | None = None
        self.quota_obj: Quota | None = None
        self._my_workspaces = member_workspaces(user)
        self.checked: Checked | None = None
        # The choices are read only when the form is shown: the API validates without them.
        self.fields["quota"].widget.choices = CallableChoiceIterator(self._quota_choices)
        self.fields["workspace"].widget.choices = CallableChoiceIterator(
            lambda: [("", "(automatic)")] + [(str(w.pk), w.name) for w in self._workspaces]
        )

    def _quota_choices(self) -> list[tuple[str, str]]:
        quotas = (
            Quota.objects.filter(workspaces__in=self._my_workspaces).distinct().order_by("name")
        )
        return [("", "—")] + [
            (str(q.pk), f"{q.name} ({q.resource_type}, {q.gpu_type})") for q in quotas
        ]

    @cached_property
    def _workspaces(self) -> list[Workspace]:
        return list(self._my_workspaces.order_by("name"))

    @property
    def show_workspace(self) -> bool:
        return len(self._workspaces) > 1

    # Validation: jobs.admission's ------------------------------------------------------

    def full_clean(self) -> None:
        """The admission rules' verdict, field by field: the fields themselves only render,
        so every problem (even "Enter a whole number.") is the rules' own."""
        self._errors = ErrorDict()
        self.cleaned_data = {}
        if not self.is_bound:
            return
        raw = {name: self._submitted(name) for name in self.fields}
        self.checked = check_job(raw, self.user, self._my_workspaces)
        self.cleaned_data = dict(self.checked.values)
        self.quota_obj = self.checked.quota
        self.workspace_obj = self.checked.workspace
        for name, messages in self.checked.problems.items():
            self.add_error(None if name == rules.ALL else name, messages)

    def _submitted(self, name: str) -> Any:
        """A field's value as the user gave it: a browser sends a text area's line breaks
        as CRLF (HTML's form submission), read back as one character each, so a text is as
        long here as the same text sent to the API."""
        value = self[name].data
        if isinstance(value, str) and isinstance(self.fields[name].widget, forms.Textarea):
            return value.replace("\r\n", "\n")
        return value

    def spec(self) -> JobSpec:
        return self.checked.spec()

    def create_job(self) -> Job:
        """Create the job of a valid form (through the action function)."""
        if not self.is_valid():
            raise ValueError("create_job() on an invalid form")
        return create_job(
            user=self.user, workspace=self.workspace_obj, quota=self.quota_obj, spec=self.spec()
        )
