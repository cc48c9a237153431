"""One JSON object per log line (LOG_FORMAT=json): what log collectors parse without
guessing. Standard fields first (time, level, logger, message, request_id), then whatever
the call passed in `extra`, then the traceback. No Django import: gunicorn uses it too."""

import json
import logging
from datetime import UTC, datetime

# Attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "request_id"}
# Django passes the request object in `extra`; it is not a value for a log line.
_SKIP = frozenset({"request", "server_time"})


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or "-",
        }
        for key, value in record.__dict__.items():
            if key in _STANDARD or key in _SKIP or key.startswith("_") or key in entry:
                continue
            plain = isinstance(value, (str, int, float, bool, type(None)))
            entry[key] = value if plain else str(value)
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
