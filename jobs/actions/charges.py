"""A live pod's charge history (docs/usage-history.md): each charge move recorded as it
happens, in the transaction that moves the charge; usage history splits the pod's interval
there."""

from collections.abc import Iterable
from datetime import datetime

from jobs.models import ChargeMove


def record_charge_moves(moves: Iterable[tuple[int, int, bool, int, bool]], at: datetime) -> None:
    """(pod, from quota, from in quota, to quota, to in quota) moved at `at`: call in the
    transaction that moves the charge, so the record and the move commit together."""
    ChargeMove.objects.bulk_create(
        ChargeMove(
            pod_id=pod, at=at, from_quota_id=fq, from_in_quota=fi, to_quota_id=tq, to_in_quota=ti
        )
        for pod, fq, fi, tq, ti in moves
    )
