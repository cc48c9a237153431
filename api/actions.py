"""Every write of the api app: idempotency keys."""

from datetime import datetime

from api.models import IdempotencyKey


def claim_key(user, key: str, request_hash: str, now: datetime) -> IdempotencyKey:
    """Insert the key (raises IntegrityError when the user already holds it: the caller's
    savepoint then rolls back and it reads the holder instead)."""
    return IdempotencyKey.objects.create(
        user=user, key=key, request_hash=request_hash, created_at=now
    )


def attach_jobs(row: IdempotencyKey, job_ids: list[int], errors: list[dict]) -> None:
    IdempotencyKey.objects.filter(pk=row.pk).update(job_ids=job_ids, errors=errors)


def forget_keys_before(cutoff: datetime, user=None) -> int:
    rows = IdempotencyKey.objects.filter(created_at__lt=cutoff)
    if user is not None:
        rows = rows.filter(user=user)
    deleted, _ = rows.delete()
    return deleted
