import logging


class QuietAgentRequests(logging.Filter):
    """Drop the access-log line of each successful agent call (heartbeats every few seconds
    per node would drown everything else); errors are still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", 500)
        return not (status < 400 and "/api/v1/agent/" in record.getMessage())


class NoClientTracebacks(logging.Filter):
    """A request the console rightly refused (400 too many fields, 413 too large, 403
    permission denied) is the client's error, not the server's: Django logs it with a
    traceback at ERROR (`django.security.*`) or WARNING (`django.request`); the line stays,
    as a warning, without the traceback. Server errors (5xx) keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        client_error = record.name.startswith("django.security.") or (
            record.name == "django.request" and getattr(record, "status_code", 500) < 500
        )
        if client_error and record.exc_info:
            record.exc_info, record.exc_text = None, None
            if record.levelno > logging.WARNING:
                record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
