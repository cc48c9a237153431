"""gunicorn settings for the `web` service (`gunicorn -c deploy/gunicorn.conf.py
console.wsgi:application`). Each value can be changed by the environment variable named.

Behind the TLS proxy (Caddy) only: `forwarded_allow_ips` is the proxy's network, so a
request says it came over HTTPS (X-Forwarded-Proto) only when the proxy forwarded it; a
client reaching gunicorn directly cannot claim it (console.settings leaves Django's own
SECURE_PROXY_SSL_HEADER off for this reason).
"""

import os


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
worker_class = "gthread"
workers = _int("WEB_CONCURRENCY", 4)
threads = _int("GUNICORN_THREADS", 4)
# Agents' waits (agents.wake) hold a thread each: half of each worker's threads at most, so
# requests always have the other half. A fleet larger than workers x slots raises
# GUNICORN_THREADS (a waiting thread costs memory, not CPU); agents beyond the slots learn
# of new work at their next heartbeat.
os.environ.setdefault("AGENT_WAIT_SLOTS", str(threads // 2))
# A worker silent this long is killed and replaced (a request stuck past any sane time).
timeout = _int("GUNICORN_TIMEOUT", 60)
# On SIGTERM, requests in flight get this long to finish.
graceful_timeout = _int("GUNICORN_GRACEFUL_TIMEOUT", 30)
# Longer than the proxy's idle keep-alive (deploy/Caddyfile: 30 s), so the proxy, not
# gunicorn, closes an idle connection and never sends on one gunicorn just closed.
keepalive = _int("GUNICORN_KEEPALIVE", 75)
# Recycle workers now and then (memory growth), with jitter so they do not restart at once.
max_requests = _int("GUNICORN_MAX_REQUESTS", 1000)
max_requests_jitter = _int("GUNICORN_MAX_REQUESTS_JITTER", 100)
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
# No control socket (`gunicornc`): the container is managed by its engine, and the socket's
# default place is a home folder shared by every gunicorn of the user.
control_socket_disable = True
# The worker heartbeat file in memory: a slow container disk must not get workers killed.
_shm = "/dev/shm"  # noqa: S108 (gunicorn makes its file there with mkstemp)
worker_tmp_dir = _shm if os.path.isdir(_shm) else None

# Logs: gunicorn's own lines in the console's format (JSON in production); the access log
# is written by console.requestid (one line per request, with its request id) instead.
accesslog = None
_format = os.environ.get("LOG_FORMAT", "json")
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "console.logjson.JsonFormatter"},
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {
        "error_console": {
            "class": "logging.StreamHandler",
            "formatter": _format if _format in ("json", "plain") else "json",
            "stream": "ext://sys.stderr",
        }
    },
    # gunicorn's defaults name a root handler of their own; this dict replaces them whole.
    "root": {"level": "INFO", "handlers": ["error_console"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["error_console"], "propagate": False},
        "gunicorn.access": {"level": "INFO", "handlers": [], "propagate": False},
    },
}
