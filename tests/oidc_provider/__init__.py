"""A real OpenID Connect provider for the sign-in tests (django-oauth-toolkit), run as a
second process: `python -m tests.oidc_provider setup|user|serve` with its own SQLite file
and RSA key (docs/sign-in.md, "Tests")."""
