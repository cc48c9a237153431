"""Validation of a new job, shared by the create page and the API (same rules, same fields).

`JobForm(data, user=…)` checks the request against the user's workspaces and the registered
nodes; nothing is written until it is valid, and then only through `jobs.actions.submit.create_job`.
"""

import re
from typing import Any

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import Count, Max, OuterRef, Q, Subquery, Sum
from django.utils.choices import CallableChoiceIterator
from django.utils.functional import cached_property

from cluster.models import Node, NodeState
from jobs.actions.submit import JobSpec, create_job
from jobs.faulttolerance.policy import FtConfig, HangAction, RestartPolicy, RunType
from jobs.models import Job
from jobs.scheduler.fit import QuotaSize, never_fits
from jobs.statuses import IdleResources
from protocol import limits
from protocol.agent import job_problems
from protocol.devices import is_device_env
from protocol.text import name_problem, text_problem
from quotas.models import Quota, ResourceType, Workspace

# Per-worker and per-job bounds (a worker must also fit on one registered node).
LIMITS = {
    "workers": (1, 64),
    "gpus_per_worker": (0, 8),
    "cpus_per_worker": (1, 512),
    "memory_gb_per_worker": (1, 8192),
    "priority": (1, 9),
    "max_runtime_seconds": (60, 90 * 86400),
    "max_restarts": (0, 100),
    "hang_timeout": (5, 30 * 86400),
}
DEFAULTS = {
    "workers": 1,
    "gpus_per_worker": 1,
    "cpus_per_worker": 4,
    "memory_gb_per_worker": 16,
    "priority": 1,
    "max_restarts": 3,
    "hang_timeout": 1800,
}
ENV_KEY = limits.ENV_NAME_RE
# Kept under these names for callers; the values live in protocol.limits.
MAX_ENV_VARS = limits.ENV_VARS
MAX_ENV_VALUE = limits.ENV_VALUE
_WHITESPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")


def default_name(image: str) -> str:
    """A job name from its image: "nvcr.io/nvidia/pytorch:24.01-py3" → "pytorch"."""
    repository = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return repository.split(":", 1)[0] or "job"


def _shown(text: str) -> str:
    """A user's value quoted in an error message: short, and safe to display."""
    short = text if len(text) <= 40 else text[:40] + "…"
    return ascii(short) if name_problem(short) else repr(short)


def parse_env(value: Any) -> dict[str, str]:
    """KEY=VALUE lines (blank lines and # comments ignored) or a JSON object of strings."""
    if value in (None, ""):
        return {}
    errors: list[str] = []
    env: dict[str, str] = {}
    if isinstance(value, dict):
        items = []
        for key, val in value.items():
            if not isinstance(val, str):
                errors.append(f"{_shown(str(key))}: the value must be a string")
            items.append((str(key), val if isinstance(val, str) else ""))
    elif isinstance(value, str):
        items = []
        for number, line in enumerate(value.splitlines(), start=1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if "=" not in line:
                errors.append(f"line {number}: expected KEY=VALUE, got {_shown(stripped)}")
                continue
            key, val = line.split("=", 1)
            items.append((key.strip(), val))
    else:
        raise forms.ValidationError("Environment must be KEY=VALUE lines or an object.")
    for key, val in items:
        shown = _shown(key)
        if len(key) > limits.ENV_NAME:
            errors.append(f"{shown} is longer than {limits.ENV_NAME} characters")
        elif not ENV_KEY.fullmatch(key):
            errors.append(
                f"{shown} is not a valid variable name (letters, digits and _, "
                "not starting with a digit)"
            )
        elif is_device_env(key):
            errors.append(
                f"{key} cannot be set: each worker sees exactly the GPUs it was given "
                "(the agent sets the device variables)"
            )
        elif key in env:
            errors.append(f"{key} is set twice")
        elif text_problem(val):
            errors.append(f"{key}: the value {text_problem(val)}")
        elif len(val) > MAX_ENV_VALUE:
            errors.append(f"{key}: the value is longer than {MAX_ENV_VALUE} characters")
        else:
            env[key] = val
    if len(items) > MAX_ENV_VARS:
        errors.append(f"at most {MAX_ENV_VARS} variables")
    if errors:
        raise forms.ValidationError(errors)
    return env


class EnvField(forms.Field):
    widget = forms.Textarea(attrs={"rows": 4, "placeholder": "KEY=VALUE, one per line"})

    def to_python(self, value: Any) -> dict[str, str]:
        return parse_env(value)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return "\n".join(f"{key}={val}" for key, val in value.items())
        return value


# A checkpoint folder: plain path segments inside the job's workspace area.
CHECKPOINT_DIR = re.compile(limits.CHECKPOINT_DIR_PATTERN.removeprefix("^$|^").removesuffix("$"))


def _bounded(name: str, label: str, **kwargs) -> forms.IntegerField:
    low, high = LIMITS[name]
    message = f"{label} must be between {low} and {high}."
    return forms.IntegerField(
        label=label,
        required=False,
        initial=DEFAULTS.get(name),
        validators=[MinValueValidator(low, message), MaxValueValidator(high, message)],
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
    # Automatic Fault Tolerance (DESIGN §6), stored in Job.fault_tolerance / Job.ft_config.
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
        self._my_workspaces = Workspace.objects.filter(memberships__user=user)
        self._quota_workspaces: list[Workspace] = []  # of the chosen quota (clean_quota)
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

    # Field rules -------------------------------------------------------------------------

    def clean_quota(self) -> Quota:
        raw = self.cleaned_data["quota"].strip()
        by_id = raw.isascii() and raw.isdigit() and len(raw) <= 18  # fits a bigint
        lookup = {"pk": int(raw)} if by_id else {"name": raw}
        # With its tenant's GPUs of the same kind (the never-fit check), in the same query.
        tenant_gpus = (
            Quota.objects.filter(
                tenant_id=OuterRef("tenant_id"),
                resource_type=OuterRef("resource_type"),
                gpu_type=OuterRef("gpu_type"),
            )
            .values("tenant_id")
            .annotate(total=Sum("gpus"))
            .values("total")
        )
        quota = Quota.objects.filter(**lookup).annotate(tenant_gpus=Subquery(tenant_gpus)).first()
        if quota is None:
            raise forms.ValidationError(f"Unknown quota {raw[:100]!r}.")
        self._quota_workspaces = list(
            quota.workspaces.filter(pk__in=self._my_workspaces).order_by("name")
        )
        if not self._quota_workspaces:
            raise forms.ValidationError(
                f"Quota {quota.name} is not bound to any of your workspaces."
            )
        return quota

    def clean_image(self) -> str:
        image = self.cleaned_data["image"].strip()
        if _WHITESPACE_OR_CONTROL.search(image):
            raise forms.ValidationError("An image reference cannot contain spaces.")
        if not image.isascii() or not image.isprintable():
            raise forms.ValidationError("An image reference is printable ASCII.")
        return image

    def clean_command(self) -> str:
        # Browsers submit a textarea with CRLF line endings; a shell would read each "\r" as
        # part of a word ("sleep: invalid time interval '4\r'").
        command = self.cleaned_data["command"].replace("\r\n", "\n").replace("\r", "\n")
        command = command.strip()
        if text_problem(command):
            raise forms.ValidationError(f"The command {text_problem(command)}.")
        return command

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        problem = name_problem(name)
        if problem:
            raise forms.ValidationError(f"The name {problem}.")
        return name

    def clean_idle_resources(self) -> str:
        return self.cleaned_data["idle_resources"] or IdleResources.OFF.value

    def _clean_default(self, name: str) -> int:
        value = self.cleaned_data.get(name)
        return DEFAULTS[name] if value is None else value

    def clean_workers(self) -> int:
        return self._clean_default("workers")

    def clean_gpus_per_worker(self) -> int:
        return self._clean_default("gpus_per_worker")

    def clean_cpus_per_worker(self) -> int:
        return self._clean_default("cpus_per_worker")

    def clean_memory_gb_per_worker(self) -> int:
        return self._clean_default("memory_gb_per_worker")

    def clean_priority(self) -> int:
        return self._clean_default("priority")

    def clean_max_restarts(self) -> int:
        return self._clean_default("max_restarts")

    def clean_hang_timeout(self) -> int:
        return self._clean_default("hang_timeout")

    def clean_run_type(self) -> str:
        return self.cleaned_data["run_type"] or RunType.SYNCHRONOUS.value

    def clean_restart_policy(self) -> str:
        return self.cleaned_data["restart_policy"] or RestartPolicy.EXIT_CODE_AND_ERROR_MSG.value

    def clean_hang_action(self) -> str:
        return self.cleaned_data["hang_action"] or HangAction.RESTART.value

    def clean_checkpoint_dir(self) -> str:
        value = self.cleaned_data["checkpoint_dir"].strip()
        if value.startswith("/"):
            # Never silently turned into a relative one ("/etc" → "etc"): say what it is.
            raise forms.ValidationError(
                "Give a folder inside your workspace's checkpoint area (e.g. runs/exp1), "
                "not an absolute path."
            )
        value = value.rstrip("/")
        if not value:
            return ""
        parts = value.split("/")
        if not CHECKPOINT_DIR.fullmatch(value) or any(p in (".", "..") for p in parts):
            raise forms.ValidationError(
                "Use a relative folder of letters, digits, '.', '_' and '-' (no '..')."
            )
        return value

    def ft_config(self) -> FtConfig:
        data = self.cleaned_data
        return FtConfig(
            enabled=bool(data.get("fault_tolerance")),
            run_type=RunType(data["run_type"]),
            max_restarts=data["max_restarts"],
            policy=RestartPolicy(data["restart_policy"]),
            hang_detection=bool(data.get("hang_detection")),
            hang_timeout=data["hang_timeout"],
            hang_action=HangAction(data["hang_action"]),
        )

    # Cross-field rules -------------------------------------------------------------------

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        quota = data.get("quota")
        if isinstance(quota, Quota):
            self.quota_obj = quota
            self.workspace_obj = self._pick_workspace(quota, data.get("workspace") or "")
            self._check_fits_a_node(quota, data)
            self._check_fits_the_quota(quota, data)
        if not data.get("name") and data.get("image"):
            data["name"] = default_name(data["image"])[: limits.JOB_NAME]
        self._check_agent_accepts(data)
        return data

    def _check_agent_accepts(self, data: dict[str, Any]) -> None:
        """The last gate: what every worker spec of this job would carry must pass the agent
        protocol's own schema (protocol.agent.JobRunSpec), or the job could never run."""
        fields = {"image": "image", "command": "command", "env": "env"}
        fields["checkpoint_subdir"] = "checkpoint_dir"
        values = {
            spec_field: data[form_field]
            for spec_field, form_field in fields.items()
            if form_field in data and form_field not in self.errors
        }
        if len(values) < len(fields):
            return  # a field already has its own error
        for spec_field, message in job_problems(**values).items():
            self.add_error(fields.get(spec_field), f"Agents would refuse this: {message}")

    def _pick_workspace(self, quota: Quota, raw: str) -> Workspace | None:
        candidates = self._quota_workspaces  # read by clean_quota
        raw = raw.strip()
        if raw:
            chosen = [w for w in candidates if str(w.pk) == raw or w.name == raw]
            if len(chosen) != 1:
                names = ", ".join(w.name for w in candidates)
                self.add_error(
                    "workspace", f"Quota {quota.name} is bound to your workspaces: {names}."
                )
                return None
            return chosen[0]
        if len(candidates) > 1:
            names = ", ".join(w.name for w in candidates)
            self.add_error(
                "workspace",
                f"Quota {quota.name} is bound to several of your workspaces ({names}); pick one.",
            )
            return None
        return candidates[0]

    def _check_fits_the_quota(self, quota: Quota, data: dict[str, Any]) -> None:
        """A job that could never start on its quota is refused, never left waiting (§5)."""
        sizes = ("workers", "gpus_per_worker", "cpus_per_worker", "memory_gb_per_worker")
        if any(data.get(field) is None for field in (*sizes, "idle_resources")):
            return  # a field already has its own error
        size = QuotaSize(
            name=quota.name,
            resource_type=quota.resource_type,
            gpu_type=quota.gpu_type,
            gpus=quota.gpus,
            cpus=quota.cpus,
            memory_gb=quota.memory_gb,
            tenant_gpus=quota.tenant_gpus or 0,  # annotated by clean_quota
            tenant_quota_gpus=self._lenders(quota, data),
        )
        node_gpus = self._pool(quota, data)["node_gpus"]
        problem = never_fits(
            size,
            node_gpus=node_gpus,
            workers=data["workers"],
            gpus_per_worker=data["gpus_per_worker"],
            cpus_per_worker=data["cpus_per_worker"],
            memory_gb_per_worker=data["memory_gb_per_worker"],
            idle=data["idle_resources"],
        )
        if problem:
            self.add_error("workers", problem)

    @staticmethod
    def _lenders(quota: Quota, data: dict[str, Any]) -> tuple[int, ...]:
        """Each of the tenant's quotas' GPUs (same kind), only for a Lingjun idle job larger
        than its own quota: it can only pool whole workers (one query, only then)."""
        idle = data["idle_resources"] != IdleResources.OFF
        need = data["workers"] * data["gpus_per_worker"]
        if quota.resource_type != ResourceType.LINGJUN or not idle or need <= quota.gpus:
            return ()
        same = Quota.objects.filter(
            tenant_id=quota.tenant_id, resource_type=quota.resource_type, gpu_type=quota.gpu_type
        )
        return tuple(same.values_list("gpus", flat=True))

    _WORKER_SIZE = ("gpus_per_worker", "cpus_per_worker", "memory_gb_per_worker")

    def _pool(self, quota: Quota, data: dict[str, Any]) -> dict[str, Any]:
        """The quota's schedulable nodes in one query, grouped by GPU count (a few rows):
        the largest of each resource, how many nodes take one worker, and every node's GPU
        count (the never-fit check)."""
        if getattr(self, "_pool_cache", None) is not None:
            return self._pool_cache
        sized = all(data.get(field) is not None for field in self._WORKER_SIZE)
        fitting = (
            Q(
                gpus__gte=data["gpus_per_worker"],
                cpus__gte=data["cpus_per_worker"],
                memory_gb__gte=data["memory_gb_per_worker"],
            )
            if sized
            else Q(pk__in=[])
        )
        rows = list(
            Node.objects.filter(
                gpu_type=quota.gpu_type,
                resource_type=quota.resource_type,
                state__in=[NodeState.READY, NodeState.NOT_READY],
            )
            .values("gpus")
            .annotate(
                count=Count("pk"),
                most_cpus=Max("cpus"),
                most_memory=Max("memory_gb"),
                fitting=Count("pk", filter=fitting),
            )
            .order_by("gpus")
        )
        self._pool_cache = {
            "count": sum(r["count"] for r in rows),
            "most_gpus": max((r["gpus"] for r in rows), default=None),
            "most_cpus": max((r["most_cpus"] for r in rows), default=None),
            "most_memory": max((r["most_memory"] for r in rows), default=None),
            "fitting": sum(r["fitting"] for r in rows),
            "node_gpus": tuple(r["gpus"] for r in rows for _ in range(r["count"])),
        }
        return self._pool_cache

    def _check_fits_a_node(self, quota: Quota, data: dict[str, Any]) -> None:
        """A worker must fit on one node of the quota's type, or it could never be placed."""
        wanted = {
            "gpus_per_worker": ("most_gpus", "GPUs"),
            "cpus_per_worker": ("most_cpus", "CPUs"),
            "memory_gb_per_worker": ("most_memory", "GB of memory"),
        }
        sized = all(data.get(field) is not None for field in wanted)
        largest = self._pool(quota, data)
        kind = f"{quota.resource_type} {quota.gpu_type}"
        if not largest["count"]:
            self.add_error(
                "quota",
                f"No {kind} nodes are registered, so jobs on quota {quota.name} cannot run.",
            )
            return
        too_big = False
        for field, (key, unit) in wanted.items():
            value = data.get(field)
            if value is not None and value > largest[key]:
                too_big = True
                self.add_error(
                    field,
                    f"No {kind} node has {value} {unit}; the largest has {largest[key]}.",
                )
        if too_big or not sized:
            return
        if not largest["fitting"]:
            self.add_error(
                None,
                f"No single {kind} node has {data['gpus_per_worker']} GPUs, "
                f"{data['cpus_per_worker']} CPUs and {data['memory_gb_per_worker']} GB at once.",
            )

    # Result --------------------------------------------------------------------------------

    def spec(self) -> JobSpec:
        data = self.cleaned_data
        return JobSpec(
            name=data["name"],
            image=data["image"],
            command=data["command"],
            workers=data["workers"],
            gpus_per_worker=data["gpus_per_worker"],
            cpus_per_worker=data["cpus_per_worker"],
            memory_gb_per_worker=data["memory_gb_per_worker"],
            priority=data["priority"],
            idle_resources=data["idle_resources"],
            env=data["env"],
            max_runtime_seconds=data.get("max_runtime_seconds"),
            fault_tolerance=bool(data.get("fault_tolerance")),
            ft_config=self.ft_config().to_dict(),
            checkpoint_dir=data.get("checkpoint_dir") or "",
        )

    def create_job(self) -> Job:
        """Create the job of a valid form (through the action function)."""
        if not self.is_valid():
            raise ValueError("create_job() on an invalid form")
        return create_job(
            user=self.user, workspace=self.workspace_obj, quota=self.quota_obj, spec=self.spec()
        )


def initial_from_job(job: Job) -> dict[str, Any]:
    """Form values that clone an existing job."""
    return {
        "quota": str(job.quota_id),
        "workspace": str(job.workspace_id),
        "name": job.name,
        "image": job.image,
        "command": job.command,
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "cpus_per_worker": job.cpus_per_worker,
        "memory_gb_per_worker": job.memory_gb_per_worker,
        "priority": job.priority,
        "idle_resources": job.idle_resources,
        "env": dict(job.env),
        "max_runtime_seconds": job.max_runtime_seconds,
        **ft_initial(job),
    }


def ft_initial(job: Job) -> dict[str, Any]:
    """The fault-tolerance form fields of an existing job (clone, restart)."""
    config = FtConfig.from_job(job.fault_tolerance, job.ft_config or {})
    return {
        "fault_tolerance": config.enabled,
        "run_type": config.run_type.value,
        "max_restarts": config.max_restarts,
        "restart_policy": config.policy.value,
        "hang_detection": config.hang_detection,
        "hang_timeout": config.hang_timeout,
        "hang_action": config.hang_action.value,
        "checkpoint_dir": job.checkpoint_dir,
    }
