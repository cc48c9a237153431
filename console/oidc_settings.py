"""The identity provider's settings checked at start (docs/sign-in.md): a typo fails the
start instead of every sign-in."""

from django.core.exceptions import ImproperlyConfigured

from policy.oidc import parse_group_roles

# Signatures checked against the provider's published keys (JWKS); never the shared secret.
ALGORITHMS = {"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}


def check_oidc_settings(
    *, issuer: str, secret: str, algorithm: str, scopes: str, group_roles: str
) -> None:
    problems = []
    if not issuer.startswith(("https://", "http://")):
        problems.append("OIDC_ISSUER must be the provider's issuer URL")
    if not secret:
        problems.append("OIDC_CLIENT_SECRET must be set")
    if algorithm not in ALGORITHMS:
        problems.append(f"OIDC_SIGN_ALGO must be one of {', '.join(sorted(ALGORITHMS))}")
    if "openid" not in scopes.split():
        problems.append("OIDC_SCOPES must include openid")
    try:
        parse_group_roles(group_roles)
    except ValueError as error:
        problems.append(f"OIDC_GROUP_ROLES: {error}")
    if problems:
        raise ImproperlyConfigured("OIDC_CLIENT_ID is set, but " + "; ".join(problems))
