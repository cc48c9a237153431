"""Idempotency keys of the API's create requests (Idempotency-Key header)."""

from django.conf import settings
from django.db import models


class IdempotencyKey(models.Model):
    """A create request already served: a retry with the same key and the same request
    gets the same jobs back instead of new ones; a different request with the key is
    refused. Rows older than settings.IDEMPOTENCY_KEY_TTL are forgotten."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)  # SHA-256 of method, path and body
    status_code = models.PositiveSmallIntegerField(default=201)
    job_ids = models.JSONField(default=list)
    errors = models.JSONField(default=list)  # a batch's refused items, replayed as they were
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.key}"
