"""`manage.py run_kube_controller`: run the Kubernetes backend's controller (docs/kubernetes.md).

One process per console (it is the only writer of its pods' statuses and logs); it stops
on SIGTERM/SIGINT. Exits 2 with a clear message when the configuration or the permissions
are missing.
"""

import signal

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from kube import config as kube_config
from kube.controller import Controller
from kube.permissions import MissingPermissions


class Command(BaseCommand):
    help = "Run the Kubernetes controller (KUBE_API_URL, KUBE_TOKEN, KUBE_NAMESPACE, …)."

    def handle(self, *args, **options) -> None:
        try:
            controller = Controller(kube_config.load())
            controller.start()
        except (ImproperlyConfigured, MissingPermissions) as exc:
            raise CommandError(str(exc), returncode=2) from None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: controller.stop())
        self.stdout.write(f"kube controller: watching {controller.config.api_url}")
        controller.run_forever()
