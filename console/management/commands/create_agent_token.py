from django.core.management.base import BaseCommand

from agents.actions import issue_bootstrap_token


class Command(BaseCommand):
    help = "Issue an agent bootstrap token and print it once (it is stored only hashed)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--note", default="issued from the command line")
        parser.add_argument(
            "--reusable", action="store_true", help="allow several nodes to register with it"
        )
        parser.add_argument("--ttl", type=int, default=None, help="lifetime in seconds")

    def handle(self, *args, **options) -> None:
        _, plain = issue_bootstrap_token(
            None, options["note"], single_use=not options["reusable"], ttl=options["ttl"]
        )
        self.stdout.write(plain)
