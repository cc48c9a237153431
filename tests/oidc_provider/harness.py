"""Start the test provider as a second process and point the console at it (the sign-in
tests: tests/e2e/test_oidc_sign_in.py, tests/web/test_oidc.py)."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "gpu-console"
CLIENT_SECRET = "console-secret-for-tests-only"
PROVIDER_NAME = "Test IdP"
PASSWORD = "provider-password"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_rsa_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@dataclass
class Provider:
    url: str
    env: dict[str, str]
    process: subprocess.Popen
    log_path: Path

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"

    def run(self, *args: str) -> None:
        result = subprocess.run(
            [sys.executable, "-m", "tests.oidc_provider", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr

    def user(self, name: str, groups: list[str]) -> None:
        """Create the provider's user `name` (password PASSWORD) or set its groups."""
        self.run("user", name, PASSWORD, f"{name}@example.com", ",".join(groups))

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def running_provider(folder: Path, redirect_uri: str) -> Iterator[Provider]:
    """The provider on a free port of 127.0.0.1 with a new RSA key and its own SQLite file,
    the console registered as a confidential client redirecting to `redirect_uri`."""
    key_file = folder / "provider-key.pem"
    key_file.write_text(new_rsa_key_pem())
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.oidc_provider.settings",
        OIDC_PROVIDER_DB=str(folder / "provider.sqlite3"),
        OIDC_PROVIDER_KEY_FILE=str(key_file),
        PYTHONUNBUFFERED="1",
    )
    port = free_port()
    log_path = folder / "provider.log"
    provider = Provider(f"http://127.0.0.1:{port}", env, None, log_path)
    provider.run("setup", CLIENT_ID, CLIENT_SECRET, redirect_uri)
    with open(log_path, "w") as log:
        provider.process = subprocess.Popen(
            [sys.executable, "-m", "tests.oidc_provider", "serve", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert provider.process.poll() is None, provider.output()
            try:
                found = requests.get(
                    f"{provider.issuer}/.well-known/openid-configuration", timeout=2
                )
                if found.status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the provider did not come up: " + provider.output()
            time.sleep(0.2)
        yield provider
    finally:
        provider.process.terminate()
        try:
            provider.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            provider.process.kill()
            provider.process.wait()


def enable_oidc(settings, issuer: str, group_roles: str, **more) -> None:
    """Turn the console's sign-in with the provider on (pytest-django's `settings`), as the
    environment would (console/settings.py)."""
    from web import oidc

    settings.OIDC_ENABLED = True
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_ISSUER = issuer
    settings.OIDC_PROVIDER_NAME = PROVIDER_NAME
    settings.OIDC_SCOPES = "openid email profile groups"
    settings.OIDC_GROUP_ROLES = group_roles
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "web.oidc.ProviderBackend",
    ]
    for name, value in more.items():
        setattr(settings, name, value)
    oidc._discovered.clear()
