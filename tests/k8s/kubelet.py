"""The tests' stand-in for the kubelet: there is no kubelet, scheduler or controller-manager
next to the real API server, so this plays their part through the API (docs/kubernetes.md):
it registers Nodes (GPUs in allocatable, Ready condition, its HTTPS endpoint as the
kubelet endpoint on InternalIP 127.0.0.1), moves Pods' status (Running, terminated,
refused with OutOf…), ends a Pod being deleted after its grace (SIGTERM: exit 143), and
serves `containerLogs`, which the API server proxies `pods/log` to."""

import json
import ssl
import subprocess
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import requests

from tests.k8s.apiserver import ADMIN_TOKEN


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Admin:
    """The API as cluster-admin (what the kubelet and the operator would do)."""

    def __init__(self, url: str, ca_file: str) -> None:
        self.url, self.ca_file = url, ca_file
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {ADMIN_TOKEN}"

    def call(self, method: str, path: str, body=None, ctype="application/json", ok=()):
        data = None if body is None else json.dumps(body)
        r = self.session.request(
            method,
            self.url + path,
            data=data,
            headers={"Content-Type": ctype},
            timeout=30,
            verify=self.ca_file,
        )
        if r.status_code >= 400 and r.status_code not in ok:
            raise AssertionError(f"{method} {path}: {r.status_code} {r.text[:500]}")
        return r.json() if r.content else {}

    def merge(self, path: str, body: dict):
        return self.call("PATCH", path, body, "application/merge-patch+json")


class _Logs(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        kubelet: FakeKubelet = self.server.kubelet
        url = urlparse(self.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            self.send_error(404)
            return
        key = (parts[1], parts[2])
        follow = parse_qs(url.query).get("follow") == ["true"]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        sent = 0
        while True:
            with kubelet.cond:
                lines = list(kubelet.logs.get(key, []))
                ended = key in kubelet.ended or not follow
                if sent >= len(lines) and not ended:
                    kubelet.cond.wait(0.5)
                    if key in kubelet.cut:
                        kubelet.cut.discard(key)
                        return  # a dropped connection
                    continue
            try:
                for stamp, text in lines[sent:]:
                    self.wfile.write(f"{stamp} {text}\n".encode())
                self.wfile.flush()
            except OSError:
                return
            sent = len(lines)
            if ended:
                return


class FakeKubelet:
    def __init__(self, url: str, ca_file: str, folder: Path) -> None:
        self.api = Admin(url, ca_file)
        self.cond = threading.Condition()
        self.logs: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self.ended: set[tuple[str, str]] = set()
        self.cut: set[tuple[str, str]] = set()
        self.dead: set[str] = set()  # nodes whose kubelet stopped
        self.on_term = None  # called with (namespace, name) when a Pod gets SIGTERM
        cert, key = folder / "kubelet.crt", folder / "kubelet.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Logs)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.server.kubelet = self
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.stopping = threading.Event()
        threading.Thread(target=self._watch_deletions, daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self.api.session.close()

    # -- nodes ---------------------------------------------------------------------

    def add_node(self, name: str, gpus: int, labels: dict, ready: bool = True) -> None:
        self.api.call("POST", "/api/v1/nodes", {"metadata": {"name": name, "labels": labels}})
        self.set_node(name, gpus=gpus, ready=ready)

    def set_node(self, name: str, *, gpus: int = 8, ready: bool = True) -> None:
        resources = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
        status = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False",
                 "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                 "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
        }  # fmt: skip
        self.api.merge(f"/api/v1/nodes/{name}/status", {"status": status})
        # The node lifecycle controller's part: the not-ready taint follows the condition
        # (admission puts it on every new Node).
        taint = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
        self.api.merge(f"/api/v1/nodes/{name}", {"spec": {"taints": [] if ready else [taint]}})

    # -- pods ----------------------------------------------------------------------

    def _status(self, ns: str, name: str, status: dict, ok: tuple[int, ...] = ()) -> None:
        path = f"/api/v1/namespaces/{ns}/pods/{name}/status"
        self.api.call("PATCH", path, {"status": status}, "application/merge-patch+json", ok=ok)

    def start(self, ns: str, name: str, image_id: str = "") -> None:
        state = {"running": {"startedAt": _now()}}
        status = _cs(state, True) | {"imageID": image_id}
        self._status(ns, name, {"phase": "Running", "containerStatuses": [status]})

    def write(self, ns: str, name: str, *lines: str) -> None:
        with self.cond:
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            self.logs.setdefault((ns, name), []).extend((stamp, line) for line in lines)
            self.cond.notify_all()

    def exit(
        self, ns: str, name: str, code: int, container: str = "worker", gone_ok: bool = False
    ) -> None:
        """The container ends with `code`. `gone_ok`: the Pod may vanish meanwhile (it is being
        deleted, and the controller may drop its finalizer first), as a real kubelet allows."""
        with self.cond:
            self.ended.add((ns, name))
            self.cond.notify_all()
        term = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                               "startedAt": _now(), "finishedAt": _now()}}  # fmt: skip
        phase = "Succeeded" if code == 0 else "Failed"
        status = _cs(term, False) | {"name": container}
        body = {"phase": phase, "containerStatuses": [status]}
        self._status(ns, name, body, ok=(404,) if gone_ok else ())

    def past_deadline(self, ns: str, name: str) -> None:
        """The kubelet ending a Pod at its activeDeadlineSeconds."""
        with self.cond:
            self.ended.add((ns, name))
            self.cond.notify_all()
        message = "Pod was active on the node longer than the specified deadline"
        status = {"phase": "Failed", "reason": "DeadlineExceeded", "message": message}
        self._status(ns, name, status)

    def refuse(self, ns: str, name: str, reason: str = "OutOfnvidia.com/gpu") -> None:
        message = "Pod Node didn't have enough resource: nvidia.com/gpu"
        self._status(ns, name, {"phase": "Failed", "reason": reason, "message": message})

    def drop_log_connections(self, ns: str, name: str) -> None:
        with self.cond:
            self.cut.add((ns, name))
            self.cond.notify_all()

    def _watch_deletions(self) -> None:
        """A Pod being deleted gets SIGTERM: it ends 143 and the kubelet deletes it."""
        handled: set[str] = set()
        while not self.stopping.is_set():
            try:
                pods = self.api.call("GET", "/api/v1/pods").get("items", [])
            except Exception:
                time.sleep(0.2)
                continue
            for pod in pods:
                meta, spec = pod["metadata"], pod["spec"]
                ns, name = meta["namespace"], meta["name"]
                uid = meta["uid"]
                if not meta.get("deletionTimestamp") or uid in handled:
                    continue
                if spec.get("nodeName") in self.dead:
                    continue
                handled.add(uid)
                if pod["status"].get("phase") not in ("Succeeded", "Failed"):
                    self.write(ns, name, "SIGTERM received")
                    if self.on_term:
                        self.on_term(ns, name)
                    self.exit(ns, name, 143, gone_ok=True)
                self.api.call(
                    "DELETE",
                    f"/api/v1/namespaces/{ns}/pods/{name}",
                    {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
                    ok=(404, 409),
                )
            time.sleep(0.1)


def _cs(state: dict, ready: bool) -> dict:
    return {
        "name": "worker",
        "ready": ready,
        "restartCount": 0,
        "image": "busybox",
        "imageID": "",
        "state": state,
    }
