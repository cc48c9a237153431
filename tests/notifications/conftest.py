"""A real HTTP receiver for webhooks, and helpers to make jobs and rules."""

import json
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from notifications.models import Channel, NotificationRule
from tests.web.conftest import _fast_passwords, api, job  # noqa: F401 (fixtures)


class Receiver:
    """Answers each delivery `fail_first` times with `fail_status`, then 200; records
    every request (headers and JSON body)."""

    def __init__(self, fail_first: int = 0, fail_status: int = 503) -> None:
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.requests: list[dict] = []
        self.seen: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                delivery = self.headers.get("X-Console-Delivery", "")
                with receiver.lock:
                    receiver.seen[delivery] += 1
                    attempt = receiver.seen[delivery]
                    status = receiver.fail_status if attempt <= receiver.fail_first else 200
                    receiver.requests.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers),
                            "body": json.loads(body),
                            "raw": body,
                            "status": status,
                        }
                    )
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else b"try later")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def accepted(self) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if r["status"] == 200]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def loopback_webhooks(settings):
    """Webhooks to this host's loopback receivers: off by default (notifications.outbound
    refuses loopback), so every test that needs a local receiver turns it on here."""
    settings.NOTIFY_ALLOW_LOOPBACK = True


@pytest.fixture
def receiver(loopback_webhooks):
    made = []

    def make(**kwargs) -> Receiver:
        made.append(Receiver(**kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture
def fast_retries(settings):
    settings.NOTIFY_BACKOFF_BASE = 0.2
    settings.NOTIFY_BACKOFF_MAX = 1
    settings.NOTIFY_TIMEOUT = 5


def webhook(workspace, url: str, events: list[str], **extra) -> NotificationRule:
    return NotificationRule.objects.create(
        workspace=workspace,
        channel=extra.pop("channel", Channel.WEBHOOK),
        url=url,
        events=events,
        **extra,
    )


from tests.web.conftest import member_client  # noqa: E402, F401 (fixture)
