"""Agent credentials: the bootstrap tokens a new node registers with (DESIGN §7).

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
