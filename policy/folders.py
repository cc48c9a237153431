"""Whose folder is it (docs/fault-tolerance.md, "Checkpoint folders"): two claims on one
tree of a workspace's area conflict when their folders are equal or one is inside the
other. Pure: plain claims in, the conflict out.

A claim is a folder relative to the workspace's area ("runs/exp1"), its kind (a job's
"checkpoint" folder, or the "output" folder it declared for its result, docs/results.md)
and whose it is (a job's id, or a label such as "jobs.0 of this batch" for an item not
created yet). Claims of one job never conflict with each other (its output may live in its
own checkpoint folder). A folder inside another job's would be pruned by it (the SDK
prunes old checkpoints of its folder); one enclosing another job's would prune that job's;
equal ones would take each other's checkpoints, or accepted result files, for their own.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class Overlap(StrEnum):
    EQUAL = "equal"
    INSIDE = "inside"  # the new folder is inside the other
    ENCLOSES = "encloses"  # the new folder holds the other


Kind = Literal["checkpoint", "output"]
CHECKPOINT: Kind = "checkpoint"
OUTPUT: Kind = "output"


@dataclass(frozen=True)
class Claim:
    path: str
    kind: Kind
    job: int | str  # a job's id, or a label for an item not created yet


@dataclass(frozen=True)
class Conflict:
    claim: Claim  # the other's
    overlap: Overlap
    kind: Kind = CHECKPOINT  # the new claim's

    def message(self) -> str:
        """What the submitter reads (the field error of `checkpoint_dir`, or of
        `result_output_dir` for an output folder)."""
        other = self.claim
        who = f"job #{other.job}" if isinstance(other.job, int) else str(other.job)
        purpose = "" if other.kind == CHECKPOINT else " for its result"
        if self.overlap == Overlap.EQUAL:
            where = f"{who[:1].upper()}{who[1:]} already uses this folder{purpose}"
        elif self.overlap == Overlap.INSIDE:
            where = f"This folder is inside {other.path}, which {who} uses{purpose}"
        else:
            where = f"This folder holds {other.path}, which {who} uses{purpose}"
        advice = "Choose a folder beside it."
        if self.overlap == Overlap.EQUAL and isinstance(other.job, int):
            advice = "Choose another folder."
            if other.kind == self.kind:
                goes_on = "from its checkpoints" if other.kind == CHECKPOINT else "its result"
                advice = f"Choose another folder, or Restart {who} to continue {goes_on}."
        if CHECKPOINT == other.kind == self.kind:
            clash = "one job's checkpoints would be taken for, or pruned by, the other's"
        else:
            clash = "one job's files would be taken for the other's result, or pruned by it"
        return f"{where}: {clash}. {advice}"


def overlap(new: str, other: str) -> Overlap | None:
    """How folder `new` lies against folder `other` (both relative, no trailing '/')."""
    if new == other:
        return Overlap.EQUAL
    if new.startswith(other + "/"):
        return Overlap.INSIDE
    if other.startswith(new + "/"):
        return Overlap.ENCLOSES
    return None


def ancestors(path: str) -> list[str]:
    """The folders enclosing `path`: "a/b/c" → ["a", "a/b"]."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def conflict(new: Claim, claims: Iterable[Claim]) -> Conflict | None:
    """The first claim of another job that `new` overlaps (equal first), or None."""
    found: list[Conflict] = []
    for claim in claims:
        if claim.job == new.job or not claim.path or not new.path:
            continue
        how = overlap(new.path, claim.path)
        if how is not None:
            found.append(Conflict(claim, how, new.kind))
    order = list(Overlap)
    return min(found, key=lambda c: order.index(c.overlap), default=None)
