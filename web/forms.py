"""The Create job page's form: the fields as the page shows them (labels, widgets, help,
bounds as input attributes), checked by `jobs.admission` (the API's rules too: one set).

The fields only render: `full_clean` hands the submitted values to
`jobs.admission.facts.check_job` and copies its problems onto the fields, so the page says
what the API says. Nothing is written until it is valid, and then only through
`jobs.actions.submit.create_job`.
"""

from typing import Any

from django import forms
from django.forms.utils import ErrorDict
from django.utils.choices import CallableChoiceIterator
from django.utils.functional import cached_property

from jobs.actions.submit import JobSpec, create_job
from jobs.admission.facts import Checked, check_job, member_workspaces
from jobs.models import Job
from policy.admission import rules
from policy.faulttolerance.policy import HangAction, RestartPolicy, RunType
from policy.statuses import IdleResources
from protocol import limits
from quotas.models import Quota, Workspace

# The form's values that clone an existing job (clone, restart).
initial_from_job = rules.fields_of_job


class EnvField(forms.Field):
    widget = forms.Textarea(attrs={"rows": 4, "placeholder": "KEY=VALUE, one per line"})

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return "\n".join(f"{key}={val}" for key, val in value.items())
        return value


def _bounded(name: str, label: str, **kwargs) -> forms.IntegerField:
    low, high = limits.JOB_BOUNDS[name]
    return forms.IntegerField(
        label=label,
        required=False,
        initial=rules.DEFAULTS.get(name),
        widget=forms.NumberInput(attrs={"min": low, "max": high}),
        **kwargs,
    )


class JobForm(forms.Form):
    quota = forms.CharField(widget=forms.Select, help_text="The quota the job runs against.")
    workspace = forms.CharField(
        required=False,
        widget=forms.Select,
        help_text="Only needed when the quota is bound to several of your workspaces.",
    )
    name = forms.CharField(
        required=False, max_length=limits.JOB_NAME, help_text="Defaults to the image."
    )
    image = forms.CharField(max_length=limits.IMAGE)
    command = forms.CharField(max_length=limits.COMMAND, widget=forms.Textarea(attrs={"rows": 3}))
    workers = _bounded("workers", "Workers")
    gpus_per_worker = _bounded("gpus_per_worker", "GPUs per worker")
    cpus_per_worker = _bounded("cpus_per_worker", "CPUs per worker")
    memory_gb_per_worker = _bounded("memory_gb_per_worker", "Memory (GB) per worker")
    priority = _bounded("priority", "Priority", help_text="1 (lowest) to 9 (highest).")
    idle_resources = forms.ChoiceField(
        choices=[(v.value, v.value) for v in IdleResources],
        required=False,
        initial=IdleResources.OFF.value,
        label="Idle resources",
    )
    env = EnvField(required=False, label="Environment")
    max_runtime_seconds = _bounded(
        "max_runtime_seconds", "Max runtime (seconds)", help_text="Empty: no limit."
    )
    # Automatic Fault Tolerance (docs/fault-tolerance.md), stored in Job.fault_tolerance and
    # Job.ft_config.
    fault_tolerance = forms.BooleanField(required=False, label="Automatic Fault Tolerance")
    run_type = forms.ChoiceField(
        choices=[(v.value, v.value) for v in RunType],
        required=False,
        initial=RunType.SYNCHRONOUS.value,
        label="Run type",
        help_text="Synchronous: any worker failure restarts the whole job. "
        "Asynchronous: only the failed worker restarts.",
    )
    max_restarts = _bounded(
        "max_restarts",
        "Max restarts",
        help_text="Failure restarts; preemptions and lost nodes do not count.",
    )
    restart_policy = forms.ChoiceField(
        choices=[(v.value, v.value) for v in RestartPolicy],
        required=False,
        initial=RestartPolicy.EXIT_CODE_AND_ERROR_MSG.value,
        label="Restart policy",
        help_text="ExitCodeAndErrorMsg restarts only retryable failures (NCCL, CUDA, ECC, "
        "lost node, OOM); OnFailure restarts on any failure.",
    )
    hang_detection = forms.BooleanField(required=False, label="Job hang detection")
    hang_timeout = _bounded(
        "hang_timeout", "Hang timeout (seconds)", help_text="No new progress step for this long."
    )
    hang_action = forms.ChoiceField(
        choices=[(v.value, v.value) for v in HangAction],
        required=False,
        initial=HangAction.RESTART.value,
        label="On hang",
    )
    checkpoint_dir = forms.CharField(
        required=False,
        max_length=limits.CHECKPOINT_DIR,
        label="Checkpoint folder",
        help_text="A folder of your workspace's checkpoint area; default job-<id>.",
    )

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
        raw = {name: self[name].data for name in self.fields}
        self.checked = check_job(raw, self.user, self._my_workspaces)
        self.cleaned_data = dict(self.checked.values)
        self.quota_obj = self.checked.quota
        self.workspace_obj = self.checked.workspace
        for name, messages in self.checked.problems.items():
            self.add_error(None if name == rules.ALL else name, messages)

    def spec(self) -> JobSpec:
        return self.checked.spec()

    def create_job(self) -> Job:
        """Create the job of a valid form (through the action function)."""
        if not self.is_valid():
            raise ValueError("create_job() on an invalid form")
        return create_job(
            user=self.user, workspace=self.workspace_obj, quota=self.quota_obj, spec=self.spec()
        )
