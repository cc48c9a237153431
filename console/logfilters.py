import logging


class QuietAgentRequests(logging.Filter):
    """Drop the access-log line of each successful agent call (heartbeats every few seconds
    per node would drown everything else); errors are still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", 500)
        return not (status < 400 and "/api/v1/agent/" in record.getMessage())
