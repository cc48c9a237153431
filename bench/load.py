"""A small HTTP load generator for the benchmarks: keep-alive connections in threads, each
sending requests as fast as answers come back, for a fixed time; and the CPU time of the
server (gunicorn's processes and the PostgreSQL backends serving it) over the same span."""

import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from bench import common

# (method, path, body, headers) for the i-th request of thread t
RequestFn = Callable[[int, int], tuple[str, str, bytes | None, dict[str, str]]]


@dataclass
class LoadResult:
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    server_cpu: float = 0.0  # gunicorn master + workers
    db_cpu: float = 0.0  # the PostgreSQL backends of the benchmark's database
    first_error: str = ""

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def cpu_ms_per_request(self) -> float:
        return 1000 * self.server_cpu / self.requests if self.requests else float("nan")

    def db_ms_per_request(self) -> float:
        return 1000 * self.db_cpu / self.requests if self.requests else float("nan")


class Client:
    """One keep-alive connection; reconnects when the server closed it."""

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        self.host, self.port = parts.hostname, parts.port
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body=None, headers=None) -> tuple[int, bytes]:
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                response = self.conn.getresponse()
                data = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return response.status, data
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, payload=None, headers=None) -> tuple[int, dict]:
        body = json.dumps(payload).encode() if payload is not None else None
        hdrs = {"Content-Type": "application/json"} | (headers or {})
        status, data = self.request(method, path, body, hdrs)
        try:
            return status, json.loads(data) if data else {}
        except ValueError:
            return status, {"raw": data[:300].decode(errors="replace")}


def db_backends(database: str) -> list[int]:
    rows = common._admin(f"SELECT pid FROM pg_stat_activity WHERE datname = '{database}'")
    return [r[0] for r in rows]


def run_load(
    base: str,
    server_pid: int,
    make: RequestFn,
    *,
    threads: int,
    seconds: float,
    database: str | None = None,
    ok: Callable[[int], bool] = lambda s: 200 <= s < 300,
    warmup: int = 1,
) -> LoadResult:
    clients = [Client(base) for _ in range(threads)]
    for t, c in enumerate(clients):  # warm every connection (and the workers' imports)
        for i in range(warmup):
            c.request(*make(t, -1 - i))
    result = LoadResult()
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    backends = db_backends(database) if database else []
    db_before = {p: common.cpu_seconds(p) for p in backends}
    cpu_before = common.tree_cpu(server_pid)
    start = time.perf_counter()

    def worker(t: int) -> None:
        i = 0
        lat, n, errors, first = [], 0, 0, ""
        while time.monotonic() < stop_at:
            method, path, body, headers = make(t, i)
            t0 = time.perf_counter()
            status, data = clients[t].request(method, path, body, headers)
            lat.append(time.perf_counter() - t0)
            n += 1
            if not ok(status):
                errors += 1
                first = first or f"{status} {data[:200]!r}"
            i += 1
        with lock:
            result.requests += n
            result.errors += errors
            result.latencies += lat
            result.first_error = result.first_error or first

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    result.seconds = time.perf_counter() - start
    result.server_cpu = common.tree_cpu(server_pid) - cpu_before
    if database:
        after = db_backends(database)
        result.db_cpu = sum(common.cpu_seconds(p) - db_before.get(p, 0.0) for p in after)
    for c in clients:
        if c.conn is not None:
            c.conn.close()
    return result
