"""Who may see and change which jobs: one helper per object type.

A researcher sees the jobs of the workspaces they are a member of, and every member of a
workspace may stop or restart its jobs (colleagues share their workspace's quota). Anything
else is a 404, never a 403, so job ids of other workspaces are not even confirmed to exist.
"""

from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404

from jobs.models import Job, Pod
from policy.statuses import PodStatus
from quotas.access import HiddenObject
from quotas.models import Membership


def member_workspace_ids(user):
    """A subquery of the ids of the user's workspaces."""
    return Membership.objects.filter(user=user).values("workspace_id")


def visible_jobs(user) -> QuerySet[Job]:
    """The jobs the user may see, with what list pages and the API show, in constant queries."""
    if not user.is_authenticated:
        return Job.objects.none()
    return (
        Job.objects.filter(workspace_id__in=member_workspace_ids(user))
        .select_related("workspace", "quota", "owner", "run")
        .annotate(
            has_unknown_worker=Exists(
                Pod.objects.filter(job=OuterRef("pk"), status=PodStatus.UNKNOWN)
            )
        )
    )


MAX_ID = 2**63 - 1


def get_job_for_user(user, pk: int | str) -> Job:
    """The job if the user is a member of its workspace (and so may also write it), else 404
    (`HiddenObject` when the job exists: one more query, on that path only)."""
    pk = int(pk)
    if not 0 < pk <= MAX_ID:
        raise Http404("No such job")
    try:
        return visible_jobs(user).get(pk=pk)
    except Job.DoesNotExist:
        if Job.objects.filter(pk=pk).exists():
            raise HiddenObject("No such job", "job", pk) from None
        raise Http404("No such job") from None
