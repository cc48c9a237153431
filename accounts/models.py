"""Who calls the console: researchers' API tokens (sessions are Django's own)."""

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """A researcher's bearer token for /api/v1/. Shown once; stored as prefix + digest."""

    KIND = "gqc"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, default="default")
    prefix = models.CharField(max_length=8, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "console_apitoken"  # created by the console app before accounts existed

    def __str__(self) -> str:
        return f"{self.user} / {self.name} ({self.prefix})"
