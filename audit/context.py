"""Where the request being served comes from, for the audit entries it causes.

Set by `audit.middleware.AuditMiddleware` for the duration of a request (a context
variable: each thread or task sees its own). Outside a request the source is the system.
"""

from contextvars import ContextVar, Token
from dataclasses import dataclass

from audit.models import Via


@dataclass(frozen=True)
class Source:
    address: str | None = None
    via: str = Via.SYSTEM
    user_agent: str = ""


SYSTEM = Source()
_current: ContextVar[Source] = ContextVar("audit_source", default=SYSTEM)


def current() -> Source:
    return _current.get()


def enter(source: Source) -> Token:
    return _current.set(source)


def leave(token: Token) -> None:
    _current.reset(token)
