"""What a notification says: the event a job notice stands for and its bodies (generic
JSON, Slack-compatible, e-mail). Pure apart from reading the notice's job."""

from typing import Any

from django.conf import settings
from django.urls import reverse

from jobs.hooks import JobNotice, Notice
from notifications.models import Event
from policy.statuses import JobStatus

_STATUS_EVENTS = {
    JobStatus.RUNNING: Event.STARTED,
    JobStatus.COMPLETED: Event.COMPLETED,
    JobStatus.FAILED: Event.FAILED,
    JobStatus.STOPPED: Event.STOPPED,
    JobStatus.TERMINATED: Event.TERMINATED,
    JobStatus.PREEMPTED: Event.PREEMPTED,
}
_NOTICE_EVENTS = {
    Notice.SUBMITTED: Event.QUEUED,
    Notice.RESTARTED: Event.RESTARTED,
    Notice.RESUBMITTED: Event.RESTARTED,
    Notice.HANG_DETECTED: Event.HANG_DETECTED,
    Notice.RECLAIMED: Event.QUOTA_RECLAIMED,
}
_VERBS = {
    Event.QUEUED: "queued",
    Event.STARTED: "started",
    Event.COMPLETED: "completed",
    Event.FAILED: "failed",
    Event.STOPPED: "stopped",
    Event.TERMINATED: "terminated",
    Event.PREEMPTED: "preempted",
    Event.RESTARTED: "restarted",
    Event.HANG_DETECTED: "hang detected",
    Event.QUOTA_RECLAIMED: "borrowed GPUs reclaimed",
}
_EMOJI = {
    Event.COMPLETED: ":white_check_mark:",
    Event.FAILED: ":x:",
    Event.PREEMPTED: ":warning:",
    Event.QUOTA_RECLAIMED: ":warning:",
    Event.HANG_DETECTED: ":hourglass:",
    Event.RESTARTED: ":repeat:",
    Event.TERMINATED: ":octagonal_sign:",
}


def event_of(notice: JobNotice) -> Event | None:
    if notice.kind == Notice.STATUS:
        return _STATUS_EVENTS.get(notice.to_status)
    return _NOTICE_EVENTS.get(notice.kind)


def job_url(job_id: int) -> str:
    return f"{settings.CONSOLE_URL}{reverse('web:detail', args=[job_id])}"


def generic_body(event: Event, notice: JobNotice) -> dict[str, Any]:
    """The webhook's JSON (also what every delivery stores)."""
    job = notice.job
    status = notice.to_status or job.status
    body: dict[str, Any] = {
        "event": str(event),
        "at": notice.at.isoformat(),
        "summary": f"Job {job.name} (#{job.pk}) {_VERBS[event]}",
        "reason": notice.reason,
        "job": {
            "id": job.pk,
            "name": job.name,
            "url": job_url(job.pk),
            "status": str(status),
            "attempt": notice.attempt,
            "workspace": job.workspace.name,
            "quota": job.quota.name,
            "owner": job.owner.get_username(),
            "exit_code": notice.detail.get("exit_code", job.exit_code),
        },
        "detail": dict(notice.detail),
    }
    if notice.reason:
        body["summary"] += f": {notice.reason.splitlines()[0][:300]}"
    return body


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(generic: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message (also accepted by Mattermost and Rocket.Chat)."""
    job = generic["job"]
    emoji = _EMOJI.get(generic["event"], ":information_source:")
    title = f"{emoji} *<{job['url']}|{_slack_escape(job['name'])} #{job['id']}>* " + (
        _VERBS.get(generic["event"], generic["event"])
    )
    lines = [title]
    if generic.get("reason"):
        lines.append(_slack_escape(generic["reason"][:1500]))
    lines.append(
        f"workspace {_slack_escape(job['workspace'])} · quota {_slack_escape(job['quota'])} "
        f"· owner {_slack_escape(job['owner'])} · attempt {job['attempt']}"
    )
    text = "\n".join(lines)
    return {
        "text": _slack_escape(generic["summary"]),
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }


def email_message(generic: dict[str, Any]) -> tuple[str, str]:
    """(subject, plain-text body)."""
    job = generic["job"]
    subject = f"[GPU console] {generic['summary']}"[:200].replace("\n", " ")
    body = "\n".join(
        [
            generic["summary"],
            "",
            f"Job:       {job['name']} (#{job['id']})",
            f"Status:    {job['status']} (attempt {job['attempt']})",
            f"Workspace: {job['workspace']}",
            f"Quota:     {job['quota']}",
            f"Owner:     {job['owner']}",
            "",
            generic.get("reason") or "",
            "",
            job["url"],
            "",
            "You receive this because of your notification settings in the GPU console.",
        ]
    )
    return subject, body
