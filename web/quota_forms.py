"""The owner pages' forms (docs/quota-tree.md "Owner pages"): fields as the pages show them.

A quota form checks nothing of its own beyond types: `check()` builds the quota as it would
be saved and asks `quotas.actions.quota_refusals` (the model's checks and the tree's rules,
the admin's and the actions' one set) for field errors. Nothing is written here; the views
write through `quotas.actions` after the preview is confirmed.
"""

from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.db.models import Q

from policy.quota_preview import QuotaEdit
from quotas.actions import quota_refusals
from quotas.models import Membership, Quota, Role, Tenant, Workspace

QUOTA_FIELDS = ("name", "gpus", "parent", "max_gpus", "lending_limit", "weight")


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
        self.proposed: Quota | None = None

    def clean(self) -> dict:
        data = super().clean()
        if self.errors:
            return data
        self.proposed = proposed = self._proposed(data)
        before = None
        if self.quota is not None:
            before = Quota.objects.get(pk=self.quota.pk)
        for name, messages in quota_refusals(proposed, before).items():
            field = name if name in self.fields else None
            for message in messages:
                self.add_error(field, message)
        return data

    def _proposed(self, data: dict) -> Quota:
        values = {name: data.get(name) for name in QUOTA_FIELDS}
        if self.quota is not None:
            quota = Quota.objects.get(pk=self.quota.pk)
            for name, value in values.items():
                setattr(quota, name, value)
            return quota
        parent = values["parent"] or self.base_parent
        return Quota(
            tenant=self.tenant,
            resource_type=parent.resource_type if parent else "",
            gpu_type=parent.gpu_type if parent else "",
            **values,
        )

    def changes(self) -> dict[str, Any]:
        """The fields to write (`quotas.actions.update_quota`'s keyword arguments)."""
        return {name: self.cleaned_data.get(name) for name in QUOTA_FIELDS}

    def edit(self) -> QuotaEdit:
        """The change as the what-if sees it (`policy.quota_preview`)."""
        q = self.proposed
        assert q is not None
        values = {
            "name": q.name,
            "gpus": q.gpus,
            "parent_id": q.parent_id,
            "max_gpus": q.max_gpus,
            "lending_limit": q.lending_limit,
            "weight": q.weight,
        }
        if self.quota is None:
            values |= {
                "tenant_id": q.tenant_id,
                "resource_type": q.resource_type,
                "gpu_type": q.gpu_type,
            }
        return QuotaEdit(self.quota.pk if self.quota else None, values)


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
        users = list(
            get_user_model()
            .objects.filter(Q(username=text) | Q(email__iexact=text), is_active=True)
            .order_by("pk")[:3]
        )
        exact = [u for u in users if u.get_username() == text]
        if exact:
            users = exact
        if not users:
            raise forms.ValidationError(f"No active user has the username or e-mail {text!r}.")
        if len(users) > 1:
            raise forms.ValidationError("Several users have that e-mail; give the username.")
        user = users[0]
        if Membership.objects.filter(workspace=self.workspace, user=user).exists():
            raise forms.ValidationError(
                f"{user.get_username()} is already a member of {self.workspace.name}."
            )
        return user


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
