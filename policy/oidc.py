"""Sign-in with the organisation's identity provider, the pure part (docs/sign-in.md): the
group mapping's text format, the checks of an ID token's claims, the account facts read
from the claims, and which memberships a sign-in adds, changes or removes. Plain values in
and out: no Django, no app.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# Workspace roles, lowest first (the values of quotas.models.Role).
ROLES = ("researcher", "quota_owner", "admin")
ROLE_ALIASES = {"owner": "quota_owner"}
# A membership's source when the provider granted it (quotas.models.MembershipSource).
PROVIDER = "oidc"
# Usernames the console accepts (Django's default username rule).
USERNAME = re.compile(r"^[\w.@+-]{1,150}$")


@dataclass(frozen=True)
class GroupGrant:
    """Members of `group` get `role` in `workspace` of `tenant` (every workspace of the
    tenant when `workspace` is None)."""

    group: str
    tenant: str
    workspace: str | None
    role: str


@dataclass(frozen=True)
class Claims:
    """What a sign-in needs from the provider's claims."""

    subject: str
    username: str
    email: str = ""
    first_name: str = ""
    last_name: str = ""
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class SyncPlan:
    """Membership changes of one sign-in, by workspace id: the provider's own memberships
    follow the groups; memberships a person added are never touched."""

    add: dict[int, str] = field(default_factory=dict)
    change: dict[int, str] = field(default_factory=dict)
    remove: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.add or self.change or self.remove)


def _entries(text: str) -> list[str]:
    """Entries split on ";" or new lines when the text has any (group names may hold
    commas, as LDAP names do), else on ","."""
    separators = r"[;\n]" if re.search(r"[;\n]", text) else ","
    return [entry.strip() for entry in re.split(separators, text) if entry.strip()]


def _grant(entry: str) -> GroupGrant:
    group, equals, target = entry.rpartition("=")
    place, colon, role = target.rpartition(":")
    tenant, slash, workspace = place.partition("/")
    role = ROLE_ALIASES.get(role.strip(), role.strip())
    group, tenant, workspace = group.strip(), tenant.strip(), workspace.strip()
    if not equals or not colon or not group or not tenant or (slash and not workspace):
        raise ValueError(f"{entry!r} is not GROUP=TENANT[/WORKSPACE]:ROLE")
    if role not in ROLES:
        raise ValueError(f"{entry!r}: the role must be one of {', '.join(ROLES)} (or owner)")
    return GroupGrant(group, tenant, workspace or None, role)


def parse_group_roles(text: str) -> tuple[GroupGrant, ...]:
    """`acme-owners=acme:quota_owner,acme-vision=acme/vision:researcher` → grants.
    Raises ValueError naming every bad entry."""
    grants, problems = [], []
    for entry in _entries(text):
        try:
            grants.append(_grant(entry))
        except ValueError as error:
            problems.append(str(error))
    if problems:
        raise ValueError("; ".join(problems))
    return tuple(grants)


def _higher(a: str | None, b: str) -> str:
    return b if a is None or ROLES.index(b) > ROLES.index(a) else a


def wanted_memberships(
    groups: Iterable[str],
    grants: Iterable[GroupGrant],
    workspaces: Iterable[tuple[int, str, str]],
) -> tuple[dict[int, str], list[str]]:
    """The role the groups grant in each workspace (the highest when several do), given
    the workspaces of the named tenants as (id, tenant name, workspace name); and the
    places named by a matching grant that do not exist ("acme/vision")."""
    mine = set(groups)
    by_tenant: dict[str, dict[str, int]] = {}
    for pk, tenant, name in workspaces:
        by_tenant.setdefault(tenant, {})[name] = pk
    wanted: dict[int, str] = {}
    missing = []
    for grant in grants:
        if grant.group not in mine:
            continue
        names = by_tenant.get(grant.tenant, {})
        if grant.workspace is None:
            targets = list(names.values())
        else:
            targets = [names[grant.workspace]] if grant.workspace in names else []
        if not targets:
            missing.append(f"{grant.tenant}/{grant.workspace}" if grant.workspace else grant.tenant)
        for pk in targets:
            wanted[pk] = _higher(wanted.get(pk), grant.role)
    return wanted, missing


def plan_sync(wanted: Mapping[int, str], current: Mapping[int, tuple[str, str]]) -> SyncPlan:
    """What one sign-in changes: `wanted` maps workspace id → role from the groups,
    `current` workspace id → (role, source) of the user's memberships now."""
    add, change, remove = {}, {}, []
    for pk, role in wanted.items():
        if pk not in current:
            add[pk] = role
        elif current[pk][1] == PROVIDER and current[pk][0] != role:
            change[pk] = role
    for pk, (_, source) in current.items():
        if source == PROVIDER and pk not in wanted:
            remove.append(pk)
    return SyncPlan(add=add, change=change, remove=tuple(sorted(remove)))


def id_token_problems(payload: Mapping, *, issuer: str, client_id: str, now: float) -> list[str]:
    """What is wrong with an ID token's claims (its signature and nonce are checked by the
    library): the issuer, the audience, the authorised party, the expiry, the subject."""
    problems = []
    if payload.get("iss") != issuer:
        problems.append(f"issuer {payload.get('iss')!r} is not {issuer!r}")
    audience = payload.get("aud")
    audiences = [audience] if isinstance(audience, str) else list(audience or [])
    if client_id not in audiences:
        problems.append("the token is not for this console (aud)")
    if len(audiences) > 1 and payload.get("azp") != client_id:
        problems.append("the token's authorised party (azp) is not this console")
    expires = payload.get("exp")
    if not isinstance(expires, int | float) or expires <= now:
        problems.append("the token has expired or has no expiry")
    if not payload.get("sub"):
        problems.append("the token names no subject (sub)")
    return problems


def _text(value) -> str:
    return value.strip() if isinstance(value, str) else ""


def read_claims(
    claims: Mapping, *, username_claim: str, groups_claim: str
) -> tuple[Claims | None, str]:
    """The account facts of a sign-in, or None and why it is refused."""
    subject = _text(claims.get("sub"))
    username = _text(claims.get(username_claim))
    if not subject:
        return None, "The identity provider named no subject (sub)."
    if not USERNAME.match(username):
        return None, (
            f"The identity provider's {username_claim!r} claim is missing or is not a "
            "username this console accepts (letters, digits and @.+-_, at most 150)."
        )
    raw = claims.get(groups_claim) or []
    groups = (raw,) if isinstance(raw, str) else tuple(g for g in raw if isinstance(g, str))
    return Claims(
        subject=subject,
        username=username,
        email=_text(claims.get("email"))[:254],
        first_name=_text(claims.get("given_name"))[:150],
        last_name=_text(claims.get("family_name"))[:150],
        groups=groups,
    ), ""
