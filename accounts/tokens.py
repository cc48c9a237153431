"""Secret tokens: prefixed, shown once, stored as a lookup prefix plus a SHA-256 digest.

The secret part carries 256 bits of randomness, so a fast hash is enough (no password
stretching needed) and a leaked database row does not reveal a usable token.
"""

import hashlib
import hmac
import secrets
from dataclasses import dataclass


@dataclass(frozen=True)
class NewToken:
    plain: str  # shown to the user exactly once
    prefix: str
    digest: str


def make_token(kind: str) -> NewToken:
    prefix = secrets.token_hex(4)
    plain = f"{kind}_{prefix}_{secrets.token_urlsafe(32)}"
    return NewToken(plain=plain, prefix=prefix, digest=digest_of(plain))


def digest_of(plain: str) -> str:
    return hashlib.sha256(plain.encode()).hexdigest()


def split_prefix(plain: str, kind: str) -> str | None:
    """The lookup prefix of a token of this kind, or None when it is malformed."""
    parts = plain.split("_", 2)
    if len(parts) != 3 or parts[0] != kind or len(parts[1]) != 8:
        return None
    if not all(c in "0123456789abcdef" for c in parts[1]):
        return None  # prefixes are hex (make_token): anything else cannot match, unqueried
    return parts[1]


def matches(plain: str, digest: str) -> bool:
    return hmac.compare_digest(digest_of(plain), digest)
