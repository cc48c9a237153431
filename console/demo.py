"""Demo data for the embedded console: created once, reused on every later start.

Passwords and the API token are random per installation; their plain values are kept in
`var/demo-credentials.json` (mode 0600) so every `make run` can print them again. The
database itself stores only hashes.
"""

import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from accounts.actions import issue_api_token, replace_api_token, set_up_user
from quotas.actions import add_member, bind_quotas, create_quota, create_tenant, create_workspace
from quotas.models import Membership, Quota, ResourceType, Role, Tenant, Workspace

RESEARCHER = "researcher"
ADMIN = "admin"
OWNER = "owner"


@dataclass
class DemoCredentials:
    researcher_username: str
    researcher_password: str
    api_token: str
    admin_username: str
    admin_password: str
    # A quota owner who is not a superuser (added later: older files lack it).
    owner_username: str = ""
    owner_password: str = ""


def credentials_path() -> Path:
    return Path(settings.VAR_DIR) / "demo-credentials.json"


def _load() -> DemoCredentials | None:
    path = credentials_path()
    if not path.exists():
        return None
    return DemoCredentials(**json.loads(path.read_text()))


def _save(creds: DemoCredentials) -> None:
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(creds), f, indent=2)


def token_is_live(plain: str) -> bool:
    from accounts.api_auth import authenticate_token

    return bool(plain) and authenticate_token(f"Bearer {plain}") is not None


def _tenant_and_workspaces() -> dict[str, Workspace]:
    """The acme tenant, its quotas and the workspaces they are bound to (only what is
    missing is created; a binding is added, none removed)."""
    tenant = Tenant.objects.filter(name="acme").first() or create_tenant("acme")
    quotas = {}
    for name, gpus in (("vision-h200", 4), ("speech-h200", 2), ("shared-h200", 2)):
        quotas[name] = Quota.objects.filter(name=name).first() or create_quota(
            name=name, tenant=tenant, resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=gpus
        )
    workspaces = {}
    for name in ("vision", "speech"):
        workspace = Workspace.objects.filter(tenant=tenant, name=name).first()
        workspaces[name] = workspace or create_workspace(tenant, name)
        wanted = (quotas[f"{name}-h200"], quotas["shared-h200"])
        bind_quotas(workspaces[name], {*workspaces[name].quotas.all(), *wanted})
    return workspaces


def _join(workspace: Workspace, user: Any, role: str) -> None:
    if not Membership.objects.filter(workspace=workspace, user=user).exists():
        add_member(workspace, user, role)


def ensure_demo_data() -> DemoCredentials:
    """Create the demo tenant, workspaces, quotas and users unless they already exist,
    through the apps' actions (quotas.actions, accounts.actions) like any other write."""
    User = get_user_model()
    creds = _load()
    with transaction.atomic():
        workspaces = _tenant_and_workspaces()
        researcher = User.objects.filter(username=RESEARCHER).first()
        admin = User.objects.filter(username=ADMIN).first()
        if creds is None or researcher is None or admin is None:
            creds = DemoCredentials(
                researcher_username=RESEARCHER,
                researcher_password=secrets.token_urlsafe(12),
                api_token="",
                admin_username=ADMIN,
                admin_password=secrets.token_urlsafe(12),
            )
            researcher = set_up_user(
                RESEARCHER, creds.researcher_password, email="researcher@example.com"
            )
            admin = set_up_user(
                ADMIN, creds.admin_password, email="admin@example.com", superuser=True
            )
            _, creds.api_token = replace_api_token(researcher, "demo")
            _save(creds)
        elif not token_is_live(creds.api_token):
            # Rotated or revoked on the API token page since: print a token that works.
            _, creds.api_token = issue_api_token(researcher, name="demo")
            _save(creds)
        owner = User.objects.filter(username=OWNER).first()
        if owner is None or not creds.owner_password:
            creds.owner_username, creds.owner_password = OWNER, secrets.token_urlsafe(12)
            owner = set_up_user(OWNER, creds.owner_password, email="owner@example.com")
            _save(creds)
        _join(workspaces["vision"], researcher, Role.RESEARCHER)
        for workspace in workspaces.values():
            for user in (admin, owner):
                _join(workspace, user, Role.QUOTA_OWNER)
    return creds


def protect_data_files(var_dir: Path) -> None:
    """The embedded console's data (SQLite database with its WAL, credentials, agent state)
    readable by this user only, whatever the umask was when `migrate` created them."""
    if not var_dir.exists():
        return
    var_dir.chmod(0o700)
    for path in var_dir.iterdir():
        if path.is_file() and (path.suffix in {".sqlite3", ".json"} or "sqlite3-" in path.name):
            path.chmod(0o600)
