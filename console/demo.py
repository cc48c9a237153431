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

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from accounts.actions import issue_api_token
from accounts.models import ApiToken
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


def ensure_demo_data() -> DemoCredentials:
    """Create the demo tenant, workspaces, quotas and users unless they already exist."""
    User = get_user_model()
    creds = _load()
    with transaction.atomic():
        tenant, _ = Tenant.objects.get_or_create(name="acme")
        vision, _ = Workspace.objects.get_or_create(tenant=tenant, name="vision")
        speech, _ = Workspace.objects.get_or_create(tenant=tenant, name="speech")
        quotas = {}
        for name, gpus in (("vision-h200", 4), ("speech-h200", 2), ("shared-h200", 2)):
            quotas[name], _ = Quota.objects.get_or_create(
                name=name,
                defaults={
                    "tenant": tenant,
                    "resource_type": ResourceType.LINGJUN,
                    "gpu_type": "H200",
                    "gpus": gpus,
                },
            )
        vision.quotas.add(quotas["vision-h200"], quotas["shared-h200"])
        speech.quotas.add(quotas["speech-h200"], quotas["shared-h200"])

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
            researcher = researcher or User(username=RESEARCHER, email="researcher@example.com")
            researcher.set_password(creds.researcher_password)
            researcher.save()
            admin = admin or User(username=ADMIN, email="admin@example.com")
            admin.is_staff = admin.is_superuser = True
            admin.set_password(creds.admin_password)
            admin.save()
            ApiToken.objects.filter(user=researcher, name="demo").delete()
            _, creds.api_token = issue_api_token(researcher, name="demo")
            _save(creds)
        elif not token_is_live(creds.api_token):
            # Rotated or revoked on the API token page since: print a token that works.
            _, creds.api_token = issue_api_token(researcher, name="demo")
            _save(creds)
        owner = User.objects.filter(username=OWNER).first()
        if owner is None or not creds.owner_password:
            creds.owner_username, creds.owner_password = OWNER, secrets.token_urlsafe(12)
            owner = owner or User(username=OWNER, email="owner@example.com")
            owner.set_password(creds.owner_password)
            owner.save()
            _save(creds)
        Membership.objects.get_or_create(
            workspace=vision, user=researcher, defaults={"role": Role.RESEARCHER}
        )
        for ws in (vision, speech):
            for user in (admin, owner):
                Membership.objects.get_or_create(
                    workspace=ws, user=user, defaults={"role": Role.QUOTA_OWNER}
                )
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
