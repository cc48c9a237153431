"""Every write to accounts: issuing, rotating and revoking researchers' API tokens; rate
counters; the users that seed data sets up; the accounts of people who sign in with the
organisation's identity provider (people are otherwise added in the admin)."""

from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from accounts.models import ApiToken, ExternalIdentity, RateCounter
from accounts.tokens import make_token
from accounts.versions import bump
from policy.oidc import Claims

# The cache of live API tokens (accounts.api_auth); also bumped when a token or a user row
# is saved or deleted (accounts.apps).
TOKENS_VERSION = "api-tokens"


def issue_api_token(user, name: str = "default") -> tuple[ApiToken, str]:
    """A new token for `user`; returns the row and the plain token (show it once)."""
    new = make_token(ApiToken.KIND)
    token = ApiToken.objects.create(user=user, name=name, prefix=new.prefix, digest=new.digest)
    return token, new.plain


def replace_api_token(user, name: str) -> tuple[ApiToken, str]:
    """Delete `user`'s tokens called `name` and issue a new one in their place."""
    with transaction.atomic():
        ApiToken.objects.filter(user=user, name=name).delete()
        return issue_api_token(user, name=name)


def rotate_api_token(user, now: datetime | None = None) -> tuple[ApiToken, str]:
    """Replace every live token of `user` with a new one. Locking the user row serialises
    two rotations, so exactly one token stays live."""
    now = now or timezone.now()
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        ApiToken.objects.filter(user=user, revoked_at__isnull=True).update(revoked_at=now)
        bump(TOKENS_VERSION)
        return issue_api_token(user)


def revoke_api_tokens(tokens, now: datetime | None = None) -> int:
    """Revoke the live tokens of a queryset; returns how many were revoked."""
    revoked = tokens.filter(revoked_at__isnull=True).update(revoked_at=now or timezone.now())
    bump(TOKENS_VERSION)  # every process's cached tokens are stale once this commits
    return revoked


def touch_last_used(token: ApiToken, now: datetime, resolution) -> None:
    """Note a token's use at most once per `resolution` (a conditional update: concurrent
    requests write it once)."""
    from django.db.models import Q

    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - resolution)
    ).update(last_used_at=now)


def set_up_user(username: str, password: str, *, email: str = "", superuser: bool = False):
    """The user `username` with this password, created when missing (with `email`);
    `superuser` makes it staff and superuser too. For seed data (`console.demo`)."""
    User = get_user_model()
    user = User.objects.filter(username=username).first() or User(username=username, email=email)
    if superuser:
        user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    return user


# -- rate counters (accounts.ratelimit's database store) -----------------------------------


def increment_rate_counter(key: str, expires_at: datetime) -> int:
    """Add one to the counter `key` (creating it) and return its new value: one atomic
    upsert, so concurrent requests of several web processes never lose a count."""
    qn = connection.ops.quote_name
    table = qn(RateCounter._meta.db_table)
    key_col, count_col, expires_col = (
        qn(RateCounter._meta.get_field(name).column) for name in ("key", "count", "expires_at")
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({key_col}, {count_col}, {expires_col}) "  # noqa: S608
            f"VALUES (%s, 1, %s) ON CONFLICT ({key_col}) "
            f"DO UPDATE SET {count_col} = {table}.{count_col} + 1 RETURNING {count_col}",
            [key, connection.ops.adapt_datetimefield_value(expires_at)],
        )
        return cursor.fetchone()[0]


def delete_rate_counters(keys: list[str]) -> None:
    RateCounter.objects.filter(key__in=keys).delete()


def purge_expired_rate_counters(now: datetime) -> int:
    deleted, _ = RateCounter.objects.filter(expires_at__lt=now).delete()
    return deleted


# -- accounts of the identity provider (docs/sign-in.md) -----------------------------------


def _linkable(username: str, issuer: str) -> tuple[object | None, str]:
    """The existing account a first sign-in of `username` takes over, or None for a new
    one; or why it may not: staff and superusers keep their password sign-in, and an
    account already linked to another subject stays with it."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        return None, ""
    if user.is_staff or user.is_superuser:
        return None, (
            f"The console account {username} is a staff account: it signs in with its "
            "password, not through the identity provider."
        )
    if ExternalIdentity.objects.filter(issuer=issuer, user=user).exists():
        return None, (
            f"The console account {username} belongs to another account of the identity provider."
        )
    return user, ""


def _update_profile(user, claims: Claims) -> None:
    fresh = {"email": claims.email, "first_name": claims.first_name, "last_name": claims.last_name}
    changed = [name for name, value in fresh.items() if value and getattr(user, name) != value]
    for name in changed:
        setattr(user, name, fresh[name])
    if changed:
        user.save(update_fields=changed)


def external_sign_in(issuer: str, claims: Claims, now: datetime | None = None):
    """The console account of the provider's subject: found by its link, else an account
    of the same username linked (unless staff, or linked to another subject), else a new
    one without a password. Its name and e-mail follow the claims. Returns (user, "") or
    (None, why refused)."""
    now = now or timezone.now()
    with transaction.atomic():
        identity = (
            ExternalIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, subject=claims.subject)
            .first()
        )
        if identity is None:
            user, refusal = _linkable(claims.username, issuer)
            if refusal:
                return None, refusal
            try:
                with transaction.atomic():
                    if user is None:
                        user = get_user_model().objects.create_user(
                            claims.username, email=claims.email
                        )
                    identity = ExternalIdentity.objects.create(
                        user=user, issuer=issuer, subject=claims.subject, last_sign_in_at=now
                    )
            except IntegrityError:  # the same first sign-in twice at once
                return None, "Another sign-in of this account is under way: try again."
        else:
            ExternalIdentity.objects.filter(pk=identity.pk).update(last_sign_in_at=now)
        _update_profile(identity.user, claims)
        return identity.user, ""


def permission_group(name: str, defaults: list[str]) -> set[str]:
    """The permissions ("app.codename") of the group `name`, created with `defaults` the
    first time it is asked for (docs/quota-tree.md "Quota owners in the admin"): the group
    is where staff widen or narrow what everyone in a role may do. Permissions not yet
    created (a model's app not migrated) are left out."""
    from django.contrib.auth.models import Group, Permission

    group = Group.objects.filter(name=name).first()
    if group is None:
        with transaction.atomic():
            group, created = Group.objects.get_or_create(name=name)
            if created:
                wanted = [d.split(".", 1) for d in defaults]
                found = Permission.objects.filter(
                    content_type__app_label__in={app for app, _ in wanted},
                    codename__in={code for _, code in wanted},
                ).select_related("content_type")
                group.permissions.set(
                    p for p in found if [p.content_type.app_label, p.codename] in wanted
                )
    rows = group.permissions.values_list("content_type__app_label", "codename")
    return {f"{app}.{code}" for app, code in rows}
