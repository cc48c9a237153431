"""Settings from the environment.

Embedded default (no variables set): SQLite in ./var, in-process loops, DEBUG off.
Production (`CONSOLE_ENV=production`): requires SECRET_KEY and ALLOWED_HOSTS, secure cookies,
HSTS; PostgreSQL via DATABASE_URL and Celery via REDIS_URL.
"""

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from console.env import (
    env_bool,
    env_float,
    env_int,
    env_list,
    env_rate,
    env_str,
    postgres_session_options,
)
from console.oidc_settings import check_oidc_settings

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("CONSOLE_VAR_DIR", str(BASE_DIR / "var")))

CONSOLE_ENV = env_str("CONSOLE_ENV", "development")
if CONSOLE_ENV not in {"development", "production", "test"}:
    raise ImproperlyConfigured(
        f"CONSOLE_ENV must be development, production or test, got {CONSOLE_ENV!r}"
    )
PRODUCTION = CONSOLE_ENV == "production"

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured("SECRET_KEY must be set when CONSOLE_ENV=production")
    SECRET_KEY = "dev-only-insecure-key-never-use-in-production-0123456789abcdefghij"

# Off unless asked for, in the embedded console too: its users must get the console's own
# 404 page, never Django's debug pages (which list every URL pattern and setting).
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["*"])
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must be set when CONSOLE_ENV=production")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # Django's admin with a site that also lets quota owners in, scoped to their tenants.
    "console.admin_site.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "ninja",  # serves the API docs' Swagger UI from its own static files (no CDN)
    "console",
    "accounts",
    "quotas",
    "cluster",
    "jobs",
    "usage",
    "audit",
    "notifications",
    "agents",
    "api",
    "web",
]

MIDDLEWARE = [
    # First: every later log line of the request carries its id.
    "console.requestid.RequestIdMiddleware",
    # A lost database connection: a safe request is retried once, else 503 (Retry-After).
    "console.dbretry.RetryLostConnection",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "audit.middleware.AuditMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
                "console.context_processors.roles",
                "console.context_processors.node_banner",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    # Persistent connections, checked before reuse: a connection the database (or a restart
    # of it) closed meanwhile is replaced instead of failing the request that picks it up.
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL,
            conn_max_age=env_int("CONN_MAX_AGE", 60, minimum=0),
            conn_health_checks=True,
        )
    }
    if DATABASES["default"]["ENGINE"].endswith("postgresql"):
        # Server-side limits for every session (seconds, 0 = none): a stuck statement, a
        # transaction left open (a scheduler cycle stuck in Python while it holds the
        # advisory lock) or a wait for a lock ends with an error instead of blocking the
        # cycles queued behind it forever. The migrate step turns them off.
        DATABASES["default"].setdefault("OPTIONS", {})["options"] = postgres_session_options(
            statement_timeout=env_int("DB_STATEMENT_TIMEOUT", 60, minimum=0),
            lock_timeout=env_int("DB_LOCK_TIMEOUT", 30, minimum=0),
            idle_in_transaction_session_timeout=env_int(
                "DB_IDLE_IN_TRANSACTION_TIMEOUT", 60, minimum=0
            ),
        )
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": env_str("SQLITE_PATH", str(VAR_DIR / "console.sqlite3")),
            # WAL lets the agent API, the web pages and the loops read while one writes;
            # IMMEDIATE transactions take the write lock up front instead of failing
            # half-way with "database is locked".
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            "TEST": {"NAME": env_str("SQLITE_TEST_PATH", str(VAR_DIR / "test.sqlite3"))},
        }
    }
IS_POSTGRES = DATABASES["default"]["ENGINE"].endswith("postgresql")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Sign-in attempts are limited per username and per client address (accounts.login_limits).
AUTHENTICATION_BACKENDS = ["accounts.login_limits.RateLimitedModelBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Sign-in with the organisation's OpenID Connect provider (docs/sign-in.md): off unless
# OIDC_CLIENT_ID is set. Endpoints come from the issuer's discovery document unless given.
OIDC_CLIENT_ID = env_str("OIDC_CLIENT_ID")
OIDC_ENABLED = bool(OIDC_CLIENT_ID)
OIDC_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET")
OIDC_ISSUER = env_str("OIDC_ISSUER")
OIDC_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME", "your organisation")
OIDC_AUTHORIZATION_ENDPOINT = env_str("OIDC_AUTHORIZATION_ENDPOINT")
OIDC_TOKEN_ENDPOINT = env_str("OIDC_TOKEN_ENDPOINT")
OIDC_USERINFO_ENDPOINT = env_str("OIDC_USERINFO_ENDPOINT")
OIDC_JWKS_ENDPOINT = env_str("OIDC_JWKS_ENDPOINT")
OIDC_SCOPES = env_str("OIDC_SCOPES", "openid email profile")
OIDC_SIGN_ALGO = env_str("OIDC_SIGN_ALGO", "RS256")
OIDC_USERNAME_CLAIM = env_str("OIDC_USERNAME_CLAIM", "preferred_username")
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups")
# GROUP=TENANT[/WORKSPACE]:ROLE, separated by "," (or ";" and new lines).
OIDC_GROUP_ROLES = env_str("OIDC_GROUP_ROLES")
if OIDC_ENABLED:
    check_oidc_settings(
        issuer=OIDC_ISSUER,
        secret=OIDC_CLIENT_SECRET,
        algorithm=OIDC_SIGN_ALGO,
        scopes=OIDC_SCOPES,
        group_roles=OIDC_GROUP_ROLES,
    )
    AUTHENTICATION_BACKENDS.append("web.oidc.ProviderBackend")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
FORMAT_MODULE_PATH = ["console.formats"]  # 24-hour UTC dates in the admin too

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# The embedded console serves static files itself (no collectstatic step needed).
WHITENOISE_USE_FINDERS = not PRODUCTION
if not PRODUCTION:
    # WhiteNoise also reads STATIC_ROOT at start and warns ("No directory at") when it is
    # missing; outside production it stays empty (collectstatic fills it in the image).
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

# Rate limits (COUNT/SECONDS), counted in Redis when REDIS_URL is set, else in the database,
# so they hold across web processes (accounts.ratelimit).
RATE_LIMIT_STORE = env_str("RATE_LIMIT_STORE", "redis" if env_str("REDIS_URL") else "database")
if RATE_LIMIT_STORE not in {"redis", "database"}:
    raise ImproperlyConfigured(
        f"RATE_LIMIT_STORE must be redis or database, not {RATE_LIMIT_STORE!r}"
    )
API_RATE_LIMIT = env_rate("API_RATE_LIMIT", "600/60")  # per API token
API_AUTH_FAILURES_PER_ADDRESS = env_rate("API_AUTH_FAILURES_PER_ADDRESS", "60/60")
LOGIN_FAILURES_PER_USER = env_rate("LOGIN_FAILURES_PER_USER", "10/300")
LOGIN_FAILURES_PER_ADDRESS = env_rate("LOGIN_FAILURES_PER_ADDRESS", "50/300")
# Reverse proxies in front of the console that append to X-Forwarded-For (0: none; the
# client address is then the socket's peer).
TRUSTED_PROXY_HOPS = env_int("TRUSTED_PROXY_HOPS", 0, minimum=0)
# How long an Idempotency-Key of a create request is remembered (seconds).
IDEMPOTENCY_KEY_TTL = env_int("IDEMPOTENCY_KEY_TTL", 24 * 3600, minimum=60)
# The longest a follow request for logs waits for new lines (seconds).
API_LOG_WAIT_MAX = env_int("API_LOG_WAIT_MAX", 30, minimum=0)

# Notifications (webhooks and e-mail, see notifications/): links in messages point here.
CONSOLE_URL = env_str("CONSOLE_URL", "").rstrip("/")
NOTIFY_INTERVAL = env_int("NOTIFY_INTERVAL", 5, minimum=1)
NOTIFY_TIMEOUT = env_int("NOTIFY_TIMEOUT", 10, minimum=1)
NOTIFY_MAX_ATTEMPTS = env_int("NOTIFY_MAX_ATTEMPTS", 8, minimum=1)
NOTIFY_BACKOFF_BASE = env_int("NOTIFY_BACKOFF_BASE", 10, minimum=1)  # 10 s, 20 s, 40 s …
NOTIFY_BACKOFF_MAX = env_int("NOTIFY_BACKOFF_MAX", 3600, minimum=1)
# Webhooks go to public addresses only (notifications.outbound). On: loopback addresses
# too (and only those), for tests' local receivers or an operator's receiver on this host.
NOTIFY_ALLOW_LOOPBACK = env_bool("NOTIFY_ALLOW_LOOPBACK", False)
# E-mail (Django's MAILERS): SMTP in production, printed to the console in development.
_MAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if PRODUCTION
    else "django.core.mail.backends.console.EmailBackend",
)
_MAIL_OPTIONS = (
    {
        "host": env_str("EMAIL_HOST", "localhost"),
        "port": env_int("EMAIL_PORT", 25, minimum=1),
        "username": env_str("EMAIL_HOST_USER"),
        "password": env_str("EMAIL_HOST_PASSWORD"),
        "use_tls": env_bool("EMAIL_USE_TLS", False),
        "timeout": 10,
    }
    if _MAIL_BACKEND.endswith("smtp.EmailBackend")
    else {}
)
MAILERS = {"default": {"BACKEND": _MAIL_BACKEND, "OPTIONS": _MAIL_OPTIONS}}
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "gpu-console@localhost")

# Security: strict in production, relaxed for the local embedded console.
SESSION_COOKIE_SECURE = PRODUCTION
CSRF_COOKIE_SECURE = PRODUCTION
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 14 * 24 * 3600, minimum=60)
SECURE_SSL_REDIRECT = PRODUCTION and env_bool("SECURE_SSL_REDIRECT", True)
# The health check is plain HTTP from inside the web container (no proxy in between).
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
# Whether a request came over HTTPS is gunicorn's decision (`wsgi.url_scheme`): it honours
# X-Forwarded-Proto only from `forwarded_allow_ips`, the TLS proxy (deploy/gunicorn.conf.py).
# Django's own SECURE_PROXY_SSL_HEADER would believe the header from any client that reaches
# the server, so it is off unless a deployment without gunicorn turns it on.
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("TRUST_X_FORWARDED_PROTO", False) else None
)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if PRODUCTION else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = PRODUCTION and env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
# Preloading is a promise about the whole domain that is slow to undo: the operator opts in.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# A strict Content-Security-Policy (Django's built-in middleware): scripts and styles only
# from this site (the admin's few inline ones carry the per-request nonce), no inline
# styles or handlers, no plugins, no framing, forms and requests only to this site.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.NONCE],
    "img-src": [CSP.SELF, "data:"],
    "font-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
# The agent API is called by machines with bearer tokens, never by a browser with cookies.
# W021 asks for HSTS preload; leaving it off is a decision (see SECURE_HSTS_PRELOAD above).
SILENCED_SYSTEM_CHECKS: list[str] = [] if SECURE_HSTS_PRELOAD else ["security.W021"]

# Background work: "celery" (production, needs REDIS_URL), "inprocess" (embedded default:
# threads started by `manage.py run_console`), or "eager" (tests: run right after commit).
REDIS_URL = env_str("REDIS_URL")
CONSOLE_LOOPS = env_str("CONSOLE_LOOPS", "celery" if REDIS_URL else "inprocess")
if CONSOLE_LOOPS not in {"celery", "inprocess", "eager"}:
    raise ImproperlyConfigured(
        f"CONSOLE_LOOPS must be celery, inprocess or eager, not {CONSOLE_LOOPS!r}"
    )
if CONSOLE_LOOPS == "celery" and not REDIS_URL:
    raise ImproperlyConfigured("CONSOLE_LOOPS=celery needs REDIS_URL")

# Where the versions of per-process caches live (accounts.versions): "" caches nothing.
VERSION_STORE_URL = env_str("VERSION_STORE_URL", REDIS_URL or "")
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = False  # tasks are triggers: a lost one is repaired by beat
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A task is a short trigger: past the soft limit it gets SoftTimeLimitExceeded (its
# transaction rolls back), past the hard limit its worker process is killed, which closes
# its database session and so releases the scheduler's advisory lock.
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 120, minimum=1)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 180, minimum=1)
if CELERY_TASK_TIME_LIMIT <= CELERY_TASK_SOFT_TIME_LIMIT:
    raise ImproperlyConfigured("CELERY_TASK_TIME_LIMIT must be above CELERY_TASK_SOFT_TIME_LIMIT")
# Recycle worker processes now and then (memory growth in long-lived processes).
CELERY_WORKER_MAX_TASKS_PER_CHILD = env_int("CELERY_WORKER_MAX_TASKS_PER_CHILD", 1000, minimum=1)
# Celery's Django fix-up closes the database connection after every task unless this is set
# (then only every 2 x this many tasks): a new PostgreSQL session per scheduling cycle was a
# tenth of the worker's CPU. console.celery applies CONN_MAX_AGE and drops a broken
# connection before each task instead, as Django does per request (docs/processes.md).
CELERY_DB_REUSE_MAX = CELERY_WORKER_MAX_TASKS_PER_CHILD
# Celery logs through the LOGGING below (JSON in production) instead of its own handlers.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_SEND_TASK_EVENTS = False

# How long the expected-start forecast (a what-if run of the scheduler) is reused (seconds).
FORECAST_CACHE_SECONDS = env_int("FORECAST_CACHE_SECONDS", 10, minimum=0)

# Scheduling and monitoring cadence (seconds).
SCHEDULER_INTERVAL = env_int("SCHEDULER_INTERVAL", 5, minimum=1)
# Against flapping: a borrower runs at least this long before it is reclaimed (seconds).
SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM = env_int(
    "SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM", 300, minimum=0
)
# The starvation rule (docs/scheduling.md): a job waiting this long may hold back later ones.
SCHEDULER_RESERVE_AFTER = env_int("SCHEDULER_RESERVE_AFTER", 600, minimum=0)
MONITOR_INTERVAL = env_int("MONITOR_INTERVAL", 5, minimum=1)
# Usage history (docs/usage-history.md): the roll-up's cadence, how long buckets are kept
# (at least 13 months), and the most hours one run writes (a first run backfills in steps).
USAGE_ROLLUP_INTERVAL = env_int("USAGE_ROLLUP_INTERVAL", 60, minimum=1)
USAGE_RETENTION_DAYS = env_int("USAGE_RETENTION_DAYS", 400, minimum=396)
USAGE_ROLLUP_MAX_HOURS = env_int("USAGE_ROLLUP_MAX_HOURS", 168, minimum=1)
# A periodic roll-up is skipped while the last one took more than this share of the time
# since it ran: under heavy churn (an open hour of 50,000 pods took 14 s to recompute) the
# history lags instead of the roll-up taking a worker's CPU from the scheduler.
USAGE_ROLLUP_MAX_SHARE = env_float("USAGE_ROLLUP_MAX_SHARE", 0.1, minimum=0.001, maximum=1.0)

# Agent protocol.
AGENT_HEARTBEAT_INTERVAL = env_int("AGENT_HEARTBEAT_INTERVAL", 5, minimum=1)
# A node whose heartbeat is this late is NotReady (its workers Unknown).
NODE_NOT_READY_AFTER = env_int("NODE_NOT_READY_AFTER", 30, minimum=1)
# ... and after this long it is Lost (its workers Lost).
NODE_LOST_TIMEOUT = env_int("NODE_LOST_TIMEOUT", 300, minimum=1)
# Workers of a silent node are stopped by their own wrapper this long after the last applied
# heartbeat was sent; default: what agents.fencing.plan_fence leaves before NODE_LOST_TIMEOUT.
WORKER_FENCE_TIMEOUT = env_int("WORKER_FENCE_TIMEOUT", 0, minimum=0) or None
# Waking agents (agents.wake): an agent holds `wait/` open and learns of new work within a
# tick (milliseconds) instead of at its next heartbeat. Each web process holds at most
# AGENT_WAIT_SLOTS waits at once (a held wait holds a server thread; deploy/gunicorn.conf.py
# sets it from its threads), each for at most AGENT_WAIT_TIMEOUT seconds.
AGENT_WAIT_POLL = env_int("AGENT_WAIT_POLL_MS", 100, minimum=10) / 1000
AGENT_WAIT_SLOTS = env_int("AGENT_WAIT_SLOTS", 64, minimum=0)
AGENT_WAIT_TIMEOUT = env_int("AGENT_WAIT_TIMEOUT", 25, minimum=1)
# The Kubernetes backend (docs/kubernetes.md): off unless KUBE_API_URL is set.
KUBE_API_URL = env_str("KUBE_API_URL")
KUBE_TOKEN_FILE = env_str("KUBE_TOKEN_FILE", "/var/run/secrets/kubernetes.io/serviceaccount/token")
KUBE_TOKEN = env_str("KUBE_TOKEN")
KUBE_CA_FILE = env_str("KUBE_CA_FILE")
KUBE_INSECURE = env_bool("KUBE_INSECURE", False)  # tests only: no certificate check
KUBE_NAMESPACE = env_str("KUBE_NAMESPACE", "gpu-console")
KUBE_NODE_SELECTOR = env_str("KUBE_NODE_SELECTOR")
KUBE_GPU_RESOURCE = env_str("KUBE_GPU_RESOURCE", "nvidia.com/gpu")
KUBE_GPU_TYPE = env_str("KUBE_GPU_TYPE", "H200")
KUBE_RESOURCE_TYPE = env_str("KUBE_RESOURCE_TYPE", "Lingjun")
KUBE_SYNC_INTERVAL = env_int("KUBE_SYNC_INTERVAL", 2, minimum=1)
# The checkpoint volume: a PersistentVolumeClaim (or a hostPath) mounted into every worker
# at KUBE_CHECKPOINT_MOUNT, and mounted on the console at KUBE_CHECKPOINT_ROOT to scan.
KUBE_CHECKPOINT_CLAIM = env_str("KUBE_CHECKPOINT_CLAIM")
KUBE_CHECKPOINT_HOSTPATH = env_str("KUBE_CHECKPOINT_HOSTPATH")
KUBE_CHECKPOINT_MOUNT = env_str("KUBE_CHECKPOINT_MOUNT", "/checkpoints")
KUBE_CHECKPOINT_ROOT = env_str("KUBE_CHECKPOINT_ROOT")
BOOTSTRAP_TOKEN_TTL = env_int("BOOTSTRAP_TOKEN_TTL", 24 * 3600, minimum=60)
DEFAULT_STOP_GRACE = env_int("DEFAULT_STOP_GRACE", 30, minimum=0)

# /metrics (console.metrics): Prometheus scrapes with `Authorization: Bearer <METRICS_TOKEN>`;
# without a token only a logged-in superuser may read it.
METRICS_TOKEN = env_str("METRICS_TOKEN")
if PRODUCTION and METRICS_TOKEN and len(METRICS_TOKEN) < 32:
    raise ImproperlyConfigured("METRICS_TOKEN must be at least 32 characters")

# Logs: one JSON object per line in production (LOG_FORMAT=json), with the request id of the
# request or the trigger that caused them (console.requestid); plain text for a terminal.
LOG_FORMAT = env_str("LOG_FORMAT", "json" if PRODUCTION else "plain")
if LOG_FORMAT not in {"json", "plain"}:
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or plain, got {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"},
        "json": {"()": "console.logjson.JsonFormatter"},
    },
    "filters": {
        "quiet_agent": {"()": "console.logfilters.QuietAgentRequests"},
        "request_id": {"()": "console.requestid.RequestIdFilter"},
        "no_client_tracebacks": {"()": "console.logfilters.NoClientTracebacks"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["no_client_tracebacks", "request_id"],
        },
        "server": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["no_client_tracebacks", "quiet_agent", "request_id"],
        },
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "django.server": {"handlers": ["server"], "level": "INFO", "propagate": False},
        # One access line per request, written by console.requestid (gunicorn's own access
        # log is off: it knows no request id).
        "console.access": {"handlers": ["server"], "level": "INFO", "propagate": False},
    },
}
