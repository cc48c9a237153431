"""Bootstrap tokens: what an admin hands to a new node so its agent can register once.

The plain token is returned exactly once; the database keeps only a lookup prefix and a
SHA-256 digest (accounts.tokens). Agents present it as `Authorization: Bearer gqb_…` to
`POST /api/v1/agent/register/`, which claims it (see agents.auth.claim_bootstrap_token).
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from accounts.tokens import make_token
from agents.models import BootstrapToken

BOOTSTRAP_KIND = "gqb"
NODE_KIND = "gqn"


def issue_bootstrap_token(
    user,
    note: str = "",
    single_use: bool = True,
    ttl: timedelta | int | None = None,
    *,
    now: datetime | None = None,
) -> tuple[BootstrapToken, str]:
    """Create a bootstrap token; returns the row and the plain token (show it once).

    `ttl` is a timedelta or seconds; by default settings.BOOTSTRAP_TOKEN_TTL.
    """
    if ttl is None:
        ttl = timedelta(seconds=settings.BOOTSTRAP_TOKEN_TTL)
    elif isinstance(ttl, int):
        ttl = timedelta(seconds=ttl)
    if ttl <= timedelta(0):
        raise ValueError("a bootstrap token needs a positive lifetime")
    now = now or timezone.now()
    new = make_token(BOOTSTRAP_KIND)
    row = BootstrapToken.objects.create(
        note=note[:200],
        prefix=new.prefix,
        digest=new.digest,
        created_by=user,
        expires_at=now + ttl,
        single_use=single_use,
    )
    return row, new.plain
