"""Settings helpers that read the environment and fail loudly on bad values."""

import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float, maximum: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if not minimum <= value <= maximum:
        raise ImproperlyConfigured(f"{name} must be from {minimum} to {maximum}, got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def postgres_session_options(**seconds: int) -> str:
    """libpq `options` that set server parameters for every session, e.g.
    `-c statement_timeout=60000`; a value of 0 leaves the server's default (none)."""
    return " ".join(f"-c {name}={value * 1000}" for name, value in seconds.items() if value)


def env_rate(name: str, default: str) -> str:
    """A rate limit written COUNT/SECONDS ("600/60"), checked here so a typo fails at start."""
    raw = os.environ.get(name, default).strip()
    count, _, period = raw.partition("/")
    if not (count.isdigit() and period.isdigit() and int(count) >= 1 and int(period) >= 1):
        raise ImproperlyConfigured(f"{name} must be COUNT/SECONDS such as 600/60, got {raw!r}")
    return raw
