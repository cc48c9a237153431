"""The database's own checks on the tree's fields, and the same values refused earlier as
field errors by `Quota.clean` (quotas.models.validate_quota_change): a form never reaches an
IntegrityError. Runs on SQLite and PostgreSQL (both enforce check constraints)."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from quotas.models import Quota, ResourceType, validate_quota_change


@pytest.fixture
def org(tenant) -> Quota:
    return Quota.objects.create(
        tenant=tenant, name="org", resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=32
    )


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"max_gpus": 8}, "max_gpus"), ({"weight": 0.0}, "weight"), ({"weight": -1.0}, "weight")],
)
def test_the_database_refuses_what_clean_reports_as_a_field_error(org, changes, field):
    for key, value in changes.items():
        setattr(org, key, value)
    with pytest.raises(ValidationError) as refused:
        org.full_clean()
    assert field in refused.value.message_dict
    with pytest.raises(IntegrityError), transaction.atomic():
        org.save()


def test_a_quota_cannot_be_its_own_parent_in_the_database(org):
    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.filter(pk=org.pk).update(parent=org)
    org.parent_id = org.pk
    with pytest.raises(ValidationError) as refused:
        org.full_clean()
    assert refused.value.message_dict["parent"] == ["A quota cannot be its own parent."]


def test_children_above_the_parent_are_refused_before_saving(org, quota, django_assert_num_queries):
    """The database cannot check a sum over rows: the rules do, in one query."""
    quota.parent = org
    quota.gpus = 33
    with django_assert_num_queries(1), pytest.raises(ValidationError) as refused:
        validate_quota_change(quota)
    assert "gpus" in refused.value.message_dict
    validate_quota_change(quota, {"gpus": 32})  # the proposed change, without touching quota
