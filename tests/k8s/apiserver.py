"""A real kube-apiserver (v1.20.2, scripts/kube-build) and etcd on free loopback ports, for
the Kubernetes backend's tests (docs/kubernetes.md). The flags are the verified recipe."""

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import requests

CACHE_BINARY = Path.home() / ".cache/gpu-console/kubernetes/kube-apiserver-1.20.2"
ADMIN_TOKEN = "admin-token-for-tests"
CONSOLE_TOKEN = "console-token-for-tests"
NOBODY_TOKEN = "nobody-token-for-tests"
CONSOLE_USER = "system:serviceaccount:gpu-console:gpu-console"


def binary() -> str:
    """The kube-apiserver to run: KUBE_APISERVER (`make test-k8s` sets it from
    scripts/kube-build), else "": the tests are skipped. Set, a server that cannot start
    fails them. Plain `make test` leaves them to `make test-k8s` even where the build
    cache (CACHE_BINARY) exists, so CI runs them once."""
    return os.environ.get("KUBE_APISERVER", "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ApiServer:
    url: str
    processes: list[subprocess.Popen]
    folder: Path
    log: object = None  # the processes' output file, closed with them
    etcd_url: str = ""

    def compact(self, revision: str) -> None:
        """Compact etcd's history up to `revision`: older watches get 410 Gone (the server
        runs without its watch cache, so watches are served from etcd's history)."""
        subprocess.run(
            ["etcdctl", f"--endpoints={self.etcd_url}", "compact", revision],
            check=True,
            capture_output=True,
            env={**os.environ, "ETCDCTL_API": "3"},
        )

    @property
    def ca_file(self) -> str:
        """The server's self-signed certificate with its CA (the file it wrote at start)."""
        return str(self.folder / "certs" / "apiserver.crt")

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.terminate()
        for proc in reversed(self.processes):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:  # open watches hold a graceful shutdown
                proc.kill()
                proc.wait()
        if self.log is not None:
            self.log.close()


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _wait_ready(
    url: str, procs: list[subprocess.Popen], log: Path, ca: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{proc.args[0]} exited {proc.returncode}:\n{log.read_text()[-3000:]}"
                )
        try:
            if (
                ca.exists()
                and requests.get(f"{url}/readyz", headers=headers, verify=str(ca), timeout=2).ok
            ):
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"kube-apiserver not ready after {timeout}s:\n{log.read_text()[-3000:]}")


def start(folder: Path, apiserver: str, timeout: float = 90) -> ApiServer:
    etcd = shutil.which("etcd")
    if not etcd:
        raise RuntimeError("etcd is not installed (scripts/kube-build installs it)")
    folder.mkdir(parents=True, exist_ok=True)
    client, peer, secure = free_port(), free_port(), free_port()
    (folder / "tokens.csv").write_text(
        f"{ADMIN_TOKEN},admin,1,system:masters\n"
        f'{CONSOLE_TOKEN},{CONSOLE_USER},2,"system:serviceaccounts,system:authenticated"\n'
        f"{NOBODY_TOKEN},nobody,3\n"
    )
    _openssl("genrsa", "-out", str(folder / "sa.key"), "2048")
    _openssl("rsa", "-in", str(folder / "sa.key"), "-pubout", "-out", str(folder / "sa.pub"))
    log = folder / "server.log"
    out = open(log, "ab")  # noqa: SIM115 (kept open for the processes' lifetime)
    etcd_proc = subprocess.Popen(
        [etcd, "--data-dir", str(folder / "etcd"), "--name", "x",
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"x=http://127.0.0.1:{peer}"],
        stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    api_proc = subprocess.Popen(
        [apiserver, f"--etcd-servers=http://127.0.0.1:{client}",
         "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
         f"--secure-port={secure}", "--insecure-port=0", f"--cert-dir={folder / 'certs'}",
         f"--token-auth-file={folder / 'tokens.csv'}", "--authorization-mode=Node,RBAC",
         f"--service-account-key-file={folder / 'sa.pub'}",
         f"--service-account-signing-key-file={folder / 'sa.key'}",
         f"--service-account-issuer=https://127.0.0.1:{secure}",
         "--service-cluster-ip-range=10.96.0.0/24",
         "--disable-admission-plugins=ServiceAccount",
         "--kubelet-preferred-address-types=InternalIP", "--watch-cache=false"],
        stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    server = ApiServer(
        f"https://127.0.0.1:{secure}",
        [etcd_proc, api_proc],
        folder,
        out,
        f"http://127.0.0.1:{client}",
    )
    try:
        _wait_ready(server.url, server.processes, log, Path(server.ca_file), timeout)
    except Exception:
        server.stop()
        raise
    return server
