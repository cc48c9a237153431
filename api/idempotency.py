"""`Idempotency-Key` on the API's create requests: a retried create never makes two jobs.

The key is stored per user with a hash of the request (method, path, canonical JSON body)
in the same transaction that creates the jobs: a retry with the same key and request gets
the jobs of the first (201 again, header `Idempotent-Replayed: true`); the same key with a
different request is refused (422 `idempotency_key_reused`). Two concurrent requests with
one key serialise on the key's unique index, and the second then replays the first. A
create that fails (validation) stores nothing, so it can be retried with the same key.
Keys are forgotten after `settings.IDEMPOTENCY_KEY_TTL`.
"""

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone

from accounts.api_auth import ApiError
from api.actions import attach_jobs, claim_key, forget_keys_before
from api.models import IdempotencyKey
from api.parsing import parse_json_object

HEADER = "Idempotency-Key"
MAX_KEY = 255
PURGE_CHANCE = 0.01


def _valid_key(key: str) -> str:
    key = key.strip()
    if not 1 <= len(key) <= MAX_KEY or not all(0x21 <= ord(c) <= 0x7E for c in key):
        raise ApiError(
            400,
            "validation_error",
            f"{HEADER} must be 1 to {MAX_KEY} printable ASCII characters without spaces.",
            HEADER,
        )
    return key


def request_hash(request: HttpRequest) -> str:
    body = parse_json_object(request.body) if request.body else {}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = f"{request.method}\n{request.path.rstrip('/')}\n{canonical}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class Outcome:
    """What a create did (`jobs`), or, on a replay, the ids it made the first time."""

    jobs: list[Any] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    replayed_ids: list[int] | None = None

    @property
    def replayed(self) -> bool:
        return self.replayed_ids is not None


def _replay(row: IdempotencyKey, digest: str) -> Outcome:
    if row.request_hash != digest:
        raise ApiError(
            422,
            "idempotency_key_reused",
            f"This {HEADER} was used for a different request; use a new key.",
            HEADER,
        )
    return Outcome(errors=list(row.errors), replayed_ids=list(row.job_ids))


def once(request: HttpRequest, create: Callable[[], Outcome]) -> Outcome:
    """Run `create` at most once per key: its outcome, or the first request's on a replay.
    Without the header it simply runs."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return create()
    key = _valid_key(raw)
    digest = request_hash(request)
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
    if random.random() < PURGE_CHANCE:
        forget_keys_before(cutoff)
    with transaction.atomic():
        found = IdempotencyKey.objects.filter(user=request.user, key=key).first()
        if found is not None and found.created_at < cutoff:
            forget_keys_before(cutoff, user=request.user)
            found = None
        if found is not None:
            return _replay(found, digest)
        try:
            with transaction.atomic():
                row = claim_key(request.user, key, digest, now)
        except IntegrityError:
            # Another request with this key committed first (we waited on its row).
            return _replay(IdempotencyKey.objects.get(user=request.user, key=key), digest)
        outcome = create()
        attach_jobs(row, [job.pk for job in outcome.jobs], outcome.errors)
    return outcome
