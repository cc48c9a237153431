"""Notification rules and the delivery records (the outbox) with every attempt."""

from django.conf import settings
from django.db import models
from django.db.models import Q


class Event(models.TextChoices):
    QUEUED = "queued", "Queued (submitted)"
    STARTED = "started", "Started (all workers running)"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    STOPPED = "stopped", "Stopped"
    TERMINATED = "terminated", "Terminated"
    PREEMPTED = "preempted", "Preempted"
    RESTARTED = "restarted", "Restarted"
    HANG_DETECTED = "hang_detected", "Hang detected"
    QUOTA_RECLAIMED = "quota_reclaimed", "Quota reclaimed (borrowed GPUs taken back)"


class Channel(models.TextChoices):
    WEBHOOK = "webhook", "Webhook (JSON)"
    SLACK = "slack", "Slack-compatible webhook"
    EMAIL = "email", "E-mail to the job's owner"


class NotificationRule(models.Model):
    """A webhook of a workspace (its jobs' events), or one user's e-mail option (the
    events of their own jobs, in every workspace)."""

    name = models.CharField(max_length=100, blank=True)
    channel = models.CharField(max_length=8, choices=Channel.choices, default=Channel.WEBHOOK)
    workspace = models.ForeignKey(
        "quotas.Workspace",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notification_rules",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notification_rules",
    )
    url = models.URLField(max_length=2000, blank=True)
    # When set, each webhook carries X-Console-Signature: sha256=<HMAC of the body>.
    secret = models.CharField(max_length=200, blank=True)
    events = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(channel="email", user__isnull=False, workspace__isnull=True)
                    | (Q(channel__in=["webhook", "slack"], workspace__isnull=False) & ~Q(url=""))
                ),
                name="rule_target_matches_channel",
            ),
            models.UniqueConstraint(
                fields=["user"], condition=Q(channel="email"), name="rule_one_email_per_user"
            ),
        ]
        indexes = [
            models.Index(fields=["workspace"], condition=Q(enabled=True), name="rule_by_ws"),
            models.Index(fields=["user"], condition=Q(enabled=True), name="rule_by_user"),
        ]

    def __str__(self) -> str:
        target = self.workspace or self.user
        return f"{self.name or self.get_channel_display()} ({target})"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed (gave up)"


class Delivery(models.Model):
    """One notification to send (the outbox row), written in the transaction of the change
    it reports; self-contained: it keeps its target and body even if the rule goes."""

    rule = models.ForeignKey(
        NotificationRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    channel = models.CharField(max_length=8, choices=Channel.choices)
    target = models.CharField(max_length=2000)  # the URL or the e-mail address
    event = models.CharField(max_length=20, choices=Event.choices)
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    payload = models.JSONField(default=dict)
    status = models.CharField(
        max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    # A sender holds the row until then; a sender that died leaves it to the next one.
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["next_attempt_at"], condition=Q(status="pending"), name="delivery_due"
            ),
            models.Index(fields=["job", "created_at"], name="delivery_by_job"),
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.target} ({self.status})"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number}: {self.status_code or self.error}"
