from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from console.demo import credentials_path, ensure_demo_data, protect_data_files


class Command(BaseCommand):
    help = "Create the demo tenant, workspaces, quotas and users (idempotent)."

    def handle(self, *args, **options) -> None:
        creds = ensure_demo_data()
        protect_data_files(Path(settings.VAR_DIR))
        self.stdout.write(
            f"Demo researcher: {creds.researcher_username} / {creds.researcher_password}\n"
            f"Demo API token:  {creds.api_token}\n"
            f"Quota owner:     {creds.owner_username} / {creds.owner_password}\n"
            f"Superuser (admin): {creds.admin_username} / {creds.admin_password}\n"
            f"(kept in {credentials_path()})"
        )
