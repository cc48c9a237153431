"""Container health check of the web service: `python -m console.healthcheck`.

It asks gunicorn directly (http://127.0.0.1:8000/healthz, no proxy in between) with a Host
the console accepts (the first of ALLOWED_HOSTS), so production settings answer 200 rather
than 400 DisallowedHost; /healthz is exempt from the HTTPS redirect (console.settings). It
sends no X-Forwarded-Proto: gunicorn would not trust it from 127.0.0.1 anyway. Exit 0 when
the console and its database answer, 1 otherwise. Standard library only: it runs often.
"""

import http.client
import os
import sys


def health_host(allowed_hosts: str) -> str:
    """A concrete host name out of ALLOWED_HOSTS ("*" and ".example.com" are patterns)."""
    for entry in (h.strip() for h in allowed_hosts.split(",")):
        if not entry or entry == "*":
            continue
        return entry.lstrip(".")
    return "localhost"


def check(port: int = 8000, timeout: float = 5.0) -> tuple[bool, str]:
    host = health_host(os.environ.get("ALLOWED_HOSTS", ""))
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", "/healthz", headers={"Host": host})
        response = connection.getresponse()
        body = response.read(500).decode(errors="replace")
    except OSError as exc:
        return False, f"no answer on 127.0.0.1:{port}: {exc}"
    finally:
        connection.close()
    return response.status == 200, f"{response.status} {body}"


def main() -> int:
    healthy, detail = check(int(os.environ.get("HEALTHCHECK_PORT", "8000")))
    print(detail)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
