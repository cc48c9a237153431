"""A lost database connection is the console being briefly unavailable, not a bug.

PostgreSQL ends a backend when it restarts, fails over or an operator terminates it; the
request that was using it fails half-way with OperationalError/InterfaceError. That request
is answered 503 with Retry-After (the stable JSON error shape), never a 500 with a
traceback; the broken connection is closed so the next use opens a new one. Safe requests
and idempotent ones (GET/HEAD/OPTIONS/PUT/DELETE, an API create with an Idempotency-Key,
an API stop) and the agent API's idempotent batches are run once more first
(`console.dbretry`, `agents.views.agent_endpoint`). A transaction the connection took down
with it was rolled back by the server: nothing half-written stays. docs/fault-tolerance.md
("A lost database connection").
"""

import logging

from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections
from django.http import JsonResponse

from accounts.api_auth import error_response

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 1
# PostgreSQL's SQLSTATEs of a session that ended: class 08 (connection exception) and the
# server's shutdown or termination of the backend (57P01 admin_shutdown, 57P02
# crash_shutdown, 57P03 cannot_connect_now). A statement or lock timeout (57014, 55P03)
# leaves the session usable and is not one of them.
LOST_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})


def _says_lost(exc: BaseException) -> bool:
    """Whether the driver's error itself says the session is gone (its SQLSTATE, or a
    client-side error without one: "server closed the connection", "connection is lost")."""
    cause = exc.__cause__
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate is not None:
        return sqlstate.startswith("08") or sqlstate in LOST_SQLSTATES
    message = str(exc).lower()
    return any(
        words in message
        for words in (
            "closed the connection",
            "connection is lost",
            "connection is closed",
            "connection already closed",
        )
    )


def is_lost_connection(exc: BaseException) -> bool:
    """Whether `exc` is the database connection going away (not a statement timeout, a
    lock timeout or a bad query: those leave the connection usable). Judged by the error
    and by the connection: a query made after the error (an error handler's) may have
    opened a new connection already."""
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    if _says_lost(exc):
        return True
    connection = connections[DEFAULT_DB_ALIAS]
    return connection.connection is None or not connection.is_usable()


def reset_connections() -> None:
    """Close the broken connection(s); the next query connects afresh."""
    for connection in connections.all(initialized_only=True):
        try:
            connection.close()
        except Exception:  # closing a dead connection may raise; it is gone either way
            log.debug("closing a lost database connection raised", exc_info=True)


def lost_connection_response(exc: BaseException) -> JsonResponse:
    reset_connections()
    log.warning("database connection lost: answered 503 (%s)", str(exc).strip()[:200])
    response = error_response(
        503, "database_unavailable", "The database connection was lost; retry shortly."
    )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response.lost_database_connection = True  # console.dbretry runs a safe request again
    return response
