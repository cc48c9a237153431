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

    def __str__(self) -> str:
        return f"{self.user} / {self.name} ({self.prefix})"


class RateCounter(models.Model):
    """One fixed-window request counter (accounts.ratelimit's database store): the key
    names the scope, who is counted and the window; rows expire with their window."""

    key = models.CharField(max_length=200, unique=True)
    count = models.PositiveIntegerField(default=0)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.key}: {self.count}"


class ExternalIdentity(models.Model):
    """A console user's account at the organisation's identity provider (docs/sign-in.md):
    the provider's subject, stable where usernames and e-mails may change."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"], name="external_identity_unique_subject"
            ),
            models.UniqueConstraint(
                fields=["issuer", "user"], name="external_identity_one_per_user"
            ),
        ]
        verbose_name_plural = "external identities"

    def __str__(self) -> str:
        return f"{self.user} at {self.issuer} ({self.subject})"
