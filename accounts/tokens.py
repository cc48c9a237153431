"""Secret tokens: prefixed, shown once, stored as a lookup prefix plus a SHA-256 digest.

The secret part carries 256 bits of randomness, so a fast hash is enough (no password
stretching needed) and a leaked database row does not reveal a usable token.
"""

import base64
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


def derived_token(kind: str, secret: bytes, material: str) -> NewToken:
    """The token `material` determines under `secret` (HMAC-SHA256, 256 bits in its secret
    part): asked for twice, the same token. For a request that may arrive twice, or late
    behind its own retry (an agent's registration with its key): every copy answers the
    same token, so none makes the one the agent kept useless."""

    def mac(purpose: str) -> bytes:
        return hmac.new(secret, f"{kind}:{purpose}:{material}".encode(), hashlib.sha256).digest()

    prefix = mac("prefix")[:4].hex()
    body = base64.urlsafe_b64encode(mac("secret")).rstrip(b"=").decode()
    plain = f"{kind}_{prefix}_{body}"
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
