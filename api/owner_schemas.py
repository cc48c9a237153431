"""The owners' API's request and response shapes (docs/quota-tree.md "Owners' API"): a
tenant's tree, a quota's creation and change with its preview, workspaces' members and
roles."""

from typing import Annotated, Literal

from ninja import Schema
from pydantic import Field, StrictFloat, StrictInt, StrictStr

from api.schemas import ErrorDetail, Strict
from protocol import limits
from quotas.models import PreemptionPolicy, ReclaimWithinTree, Role

Gpus = Annotated[StrictInt, Field(ge=0, le=limits.QUOTA_GPUS)]
Name = Annotated[StrictStr, Field(min_length=1, max_length=limits.QUOTA_NAME)]
Ref = Annotated[StrictInt | StrictStr, Field(description="A quota's name or id.")]
Weight = Annotated[StrictFloat, Field(gt=0, le=1e6)]
RoleName = Literal[*(role.value for role in Role)]
# The sharing options (docs/scheduling.md, the decision table).
Preemption = Literal[*(choice.value for choice in PreemptionPolicy)]
Reclaim = Literal[*(choice.value for choice in ReclaimWithinTree)]
BorrowPriority = Annotated[
    StrictInt,
    Field(
        ge=limits.JOB_BOUNDS["priority"][0],
        le=limits.JOB_BOUNDS["priority"][1],
        description="Idle jobs of the quota may preempt borrowers of other quotas of a lower "
        "priority, at most this one (null: never).",
    ),
]
Token = Annotated[
    StrictStr,
    Field(
        max_length=64,
        description="The `token` of the preview this change was checked with: the change is "
        "saved only while that state holds (409 stale_preview otherwise).",
    ),
]


# -- requests ------------------------------------------------------------------------------


class QuotaCreate(Strict):
    name: Name
    parent: Ref = Field(description="The parent quota (its pool is the new quota's).")
    gpus: Gpus = Field(description="Guaranteed GPUs (carved out of the parent's).")
    max_gpus: Gpus | None = None
    lending_limit: Gpus | None = None
    weight: Weight = 1.0
    preemption: Preemption = "Never"
    reclaim_within_tree: Reclaim = "Any"
    borrow_within_tree_max_priority: BorrowPriority | None = None
    token: Token | None = None


class QuotaChange(Strict):
    """Only the fields sent change."""

    name: Name | None = None
    parent: Ref | None = None
    gpus: Gpus | None = None
    max_gpus: Gpus | None = None
    lending_limit: Gpus | None = None
    weight: Weight | None = None
    # Sent: changed (a default here is never applied to a field not sent).
    preemption: Preemption = "Never"
    reclaim_within_tree: Reclaim = "Any"
    borrow_within_tree_max_priority: BorrowPriority | None = None
    token: Token | None = None


class MemberAdd(Strict):
    user: Annotated[StrictStr, Field(min_length=1, max_length=254)] = Field(
        description="A username or e-mail of an active account."
    )
    role: RoleName = "researcher"


class MembersAdd(Strict):
    members: list[MemberAdd] = Field(min_length=1, max_length=limits.MEMBERS_PER_REQUEST)


class RoleChange(Strict):
    role: RoleName


# -- responses -----------------------------------------------------------------------------


class QuotaSettings(Schema):
    id: int
    name: str
    tenant: str
    resource_type: str
    gpu_type: str
    parent: str | None
    gpus: int
    max_gpus: int | None
    lending_limit: int | None
    weight: float
    preemption: str
    reclaim_within_tree: str
    borrow_within_tree_max_priority: int | None


class Tree(Schema):
    tenant: str
    can_change: bool
    quotas: list[QuotaSettings]


class JobEffect(Schema):
    job_id: int
    name: str
    quota: str
    gpus: int
    detail: str


class OverGuarantee(Schema):
    quota: str
    charged: int
    own_before: int
    own_after: int
    jobs: list[JobEffect]


class OwnChange(Schema):
    quota: str
    before: int
    after: int


class Preview(Schema):
    """What the next scheduling cycle would do if the change were saved (the owner pages'
    preview): jobs reclaimed, preempted, re-charged, started, no longer started; own
    guarantees that change; quotas left over their new guarantee; limits passed."""

    reclaimed: list[JobEffect]
    preempted: list[JobEffect]
    moved: list[JobEffect]
    started: list[JobEffect]
    not_started: list[JobEffect]
    over: list[OverGuarantee]
    own: list[OwnChange]
    limits: list[str]
    quiet: bool = Field(description="No running or waiting job is affected.")
    lines: list[str] = Field(description="The same in words, as the admin shows it.")


class QuotaChangeResult(Schema):
    saved: bool = Field(description="False: a dry run (preview=true); nothing was written.")
    quota: QuotaSettings | None = Field(description="The quota as saved (None: a preview).")
    preview: Preview | None = Field(description="The dry run's preview (None: saved).")
    token: str = Field(description="The state the preview was computed on: send it back.")


class Member(Schema):
    id: int
    user: str
    role: str
    source: str


class Members(Schema):
    workspace: str
    tenant: str
    members: list[Member]


class MemberItemError(Schema):
    index: int
    error: ErrorDetail


class MembersAdded(Schema):
    members: list[Member]
    errors: list[MemberItemError]
