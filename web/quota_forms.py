"""The owner pages' forms (docs/quota-tree.md "Owner pages"): fields as the pages show them.

A quota form checks nothing of its own beyond types: the view hands its values to the one
path of a quota change (`jobs.actions.quota_changes.change_quota`: the model's checks and
the tree's rules, the preview, the save), the admin's and the API's path too, and shows the
path's field errors on the form. Nothing is written here.
"""

from typing import Any

from django import forms

from jobs.actions.quota_changes import QUOTA_FIELDS
from quotas.access import find_account
from quotas.models import (
    Membership,
    PreemptionPolicy,
    Quota,
    ReclaimWithinTree,
    Role,
    Tenant,
    Workspace,
)

# The sharing options (docs/scheduling.md, the decision table): written and previewed with
# the rest through the one path of a quota change; their defaults are today's rules.
SHARING_FIELDS = ("preemption", "reclaim_within_tree", "borrow_within_tree_max_priority")
SHARING_DEFAULTS = {"preemption": "Never", "reclaim_within_tree": "Any"}


class QuotaForm(forms.Form):
    name = forms.CharField(max_length=100)
    gpus = forms.IntegerField(label="Guarantee (GPUs)", min_value=0)
    parent = forms.ModelChoiceField(
        queryset=Quota.objects.none(),
        required=False,
        empty_label="(none: a root)",
        help_text="A quota of the same tenant, resource type and GPU type.",
    )
    max_gpus = forms.IntegerField(
        label="Limit (GPUs)",
        required=False,
        min_value=0,
        help_text="Most GPUs its subtree's jobs hold at once; empty: no limit.",
    )
    lending_limit = forms.IntegerField(
        label="Lending limit (GPUs)",
        required=False,
        min_value=0,
        help_text="Most of its subtree's unused guarantee lent outside it; empty: all, 0: none.",
    )
    weight = forms.FloatField(
        initial=1.0, help_text="Its share of idle GPUs when quotas compete (above 0)."
    )
    preemption = forms.ChoiceField(
        label="Preemption within the quota",
        choices=PreemptionPolicy.choices,
        initial=PreemptionPolicy.NEVER,
        required=False,
        help_text="Whether a job may preempt this quota's in-quota jobs of lower priority.",
    )
    reclaim_within_tree = forms.ChoiceField(
        label="Reclaim lent GPUs from",
        choices=ReclaimWithinTree.choices,
        initial=ReclaimWithinTree.ANY,
        required=False,
        help_text="Which borrowers its jobs may preempt to get the guarantee back.",
    )
    borrow_within_tree_max_priority = forms.IntegerField(
        label="Idle jobs may preempt borrowers up to priority",
        required=False,
        help_text="Lower-priority borrowers of other quotas, at most this priority; empty: never.",
    )

    def __init__(
        self, *args: Any, tenant: Tenant, quota: Quota | None, parent: Quota | None, **kw: Any
    ):
        super().__init__(*args, **kw)
        self.tenant, self.quota, self.base_parent = tenant, quota, parent
        pool = quota or parent
        choices = Quota.objects.filter(tenant=tenant).order_by("name")
        if pool is not None:
            choices = choices.filter(resource_type=pool.resource_type, gpu_type=pool.gpu_type)
        if quota is not None:
            choices = choices.exclude(pk=quota.pk)
        self.fields["parent"].queryset = choices

    def values(self) -> dict[str, Any]:
        """The fields as `jobs.actions.quota_changes.change_quota` takes them. A sharing
        option not posted at all (an older form, a script) keeps its value; an empty choice
        is its current value, or today's rule for a new quota."""
        values = {name: self.cleaned_data.get(name) for name in QUOTA_FIELDS + SHARING_FIELDS}
        for name in SHARING_FIELDS:
            current = getattr(self.quota, name) if self.quota is not None else None
            if name not in self.data:
                values[name] = current if self.quota is not None else SHARING_DEFAULTS.get(name)
            elif name in SHARING_DEFAULTS and not values[name]:
                values[name] = current or SHARING_DEFAULTS[name]
        return values

    def add_refusals(self, errors: dict[str, list[str]]) -> None:
        """The path's field errors on their fields (the whole form's when not a field)."""
        for name, problems in errors.items():
            for problem in problems:
                self.add_error(name if name in self.fields else None, problem)


class WorkspaceForm(forms.Form):
    name = forms.CharField(max_length=100)
    quotas = forms.ModelMultipleChoiceField(
        queryset=Quota.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="The quotas its members submit against.",
    )

    def __init__(self, *args: Any, tenant: Tenant, **kw: Any):
        super().__init__(*args, **kw)
        self.tenant = tenant
        self.fields["quotas"].queryset = Quota.objects.filter(tenant=tenant).order_by("name")

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if Workspace.objects.filter(tenant=self.tenant, name=name).exists():
            raise forms.ValidationError(f"{self.tenant.name} already has a workspace {name}.")
        return name


class BindForm(forms.Form):
    quotas = forms.ModelMultipleChoiceField(
        queryset=Quota.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Bound quotas",
    )

    def __init__(self, *args: Any, tenant: Tenant, **kw: Any):
        super().__init__(*args, **kw)
        self.fields["quotas"].queryset = Quota.objects.filter(tenant=tenant).order_by("name")


class MemberForm(forms.Form):
    user = forms.CharField(
        label="Username or e-mail", max_length=254, help_text="An existing account."
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.RESEARCHER)

    def __init__(self, *args: Any, workspace: Workspace, **kw: Any):
        super().__init__(*args, **kw)
        self.workspace = workspace

    def clean_user(self) -> Any:
        text = self.cleaned_data["user"].strip()
        user, why = find_account(text)
        if user is None:
            raise forms.ValidationError(why)
        if Membership.objects.filter(workspace=self.workspace, user=user).exists():
            raise forms.ValidationError(
                f"{user.get_username()} is already a member of {self.workspace.name}."
            )
        return user


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
