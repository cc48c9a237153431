"""Agent credentials: the bootstrap tokens a new node registers with (docs/agent-protocol.md).

Nodes and their GPUs live in `cluster.models`; a node's own token is kept on its row there.
"""

from django.conf import settings
from django.db import models


class BootstrapToken(models.Model):
    """Lets a new agent register once; shown once to the admin who creates it."""

    note = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=8, unique=True)
    digest = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    single_use = models.BooleanField(default=True)
    used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"bootstrap {self.prefix} ({self.note})"


class RegistrationOutcome(models.TextChoices):
    REGISTERED = "registered", "Registered"
    REREGISTERED = "re-registered", "Registered again"
    REFUSED = "refused", "Refused"
    ALLOWED = "allowed", "Re-registration allowed"


class RegistrationRecord(models.Model):
    """Every registration of a node name, refused ones included, and every operator's
    consent to register a name again (docs/agent-protocol.md: a name already registered is never
    taken over by whoever holds a bootstrap token)."""

    name = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=RegistrationOutcome.choices)
    node = models.ForeignKey(
        "cluster.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    bootstrap_prefix = models.CharField(max_length=8, blank=True)
    remote_addr = models.CharField(max_length=64, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    detail = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["name", "-created_at"], name="registration_name_time")]

    def __str__(self) -> str:
        return f"{self.name}: {self.outcome} at {self.created_at:%Y-%m-%d %H:%M:%S}"
