"""`python -m tests.oidc_provider`, run from the repository root with OIDC_PROVIDER_DB and
OIDC_PROVIDER_KEY_FILE set:

    setup CLIENT_ID CLIENT_SECRET REDIRECT_URI   migrate, register the console as a client
    user NAME PASSWORD EMAIL [GROUP,...]          create a user, or set its groups
    serve PORT                                    serve on 127.0.0.1:PORT
"""

import os
import sys


def _setup(client_id: str, secret: str, redirect_uri: str) -> None:
    from django.core.management import call_command
    from oauth2_provider.models import get_application_model

    call_command("migrate", verbosity=0, interactive=False)
    application = get_application_model()
    application.objects.filter(client_id=client_id).delete()
    application.objects.create(
        name="GPU console",
        client_id=client_id,
        client_secret=secret,
        client_type=application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=redirect_uri,
        algorithm=application.RS256_ALGORITHM,
        skip_authorization=True,
    )


def _user(name: str, password: str, email: str, groups: str = "") -> None:
    from django.contrib.auth.models import Group, User

    user = User.objects.filter(username=name).first()
    if user is None:  # a new password would end the user's session at the provider
        user = User(username=name, email=email)
        user.set_password(password)
        user.save()
    user.groups.set([Group.objects.get_or_create(name=g)[0] for g in groups.split(",") if g])


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.oidc_provider.settings")
    import django

    django.setup()
    command, args = argv[0], argv[1:]
    if command == "setup":
        _setup(*args)
    elif command == "user":
        _user(*args)
    elif command == "serve":
        from django.core.management import call_command

        call_command("runserver", f"127.0.0.1:{args[0]}", use_reloader=False, verbosity=1)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
