"""Audit entries: append-only, one row per action a person (or a refused caller) took."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class Via(models.TextChoices):
    WEB = "web", "Web console"
    API = "api", "API"
    ADMIN = "admin", "Admin"
    SYSTEM = "system", "System"


class AuditEntry(models.Model):
    at = models.DateTimeField(default=timezone.now)
    # Dotted: "<object type>.<verb>", e.g. job.submit, quota.change, node.cordon,
    # api_token.revoke, access.denied, login.failed.
    action = models.CharField(max_length=64)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # The name at the time (kept when the account is deleted; the attempted name of a
    # failed sign-in; "" for the system).
    actor_name = models.CharField(max_length=150, blank=True)
    object_type = models.CharField(max_length=64, blank=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    source_address = models.GenericIPAddressField(null=True, blank=True)
    via = models.CharField(max_length=8, choices=Via.choices, default=Via.SYSTEM)
    user_agent = models.CharField(max_length=200, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    # The admin history entry this one mirrors (each is mirrored once).
    admin_log_id = models.PositiveBigIntegerField(null=True, blank=True, unique=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            models.Index(fields=["-at"], name="audit_recent"),
            models.Index(fields=["action", "-at"], name="audit_action_recent"),
            models.Index(fields=["object_type", "object_id"], name="audit_object"),
            models.Index(fields=["actor", "-at"], name="audit_actor_recent"),
        ]

    def __str__(self) -> str:
        who = self.actor_name or "system"
        return f"{self.at:%Y-%m-%d %H:%M:%S} {who} {self.action} {self.object_repr}".strip()
