"""A small client of the Kubernetes API (HTTPS JSON, bearer token), owned here.

`requests` is already a dependency; the controller needs a dozen calls (list, watch,
create, delete, patch, the log stream, an access review), and owning them keeps the
behaviour the controller relies on in view: a watch is one streamed GET of JSON lines, a
410 is `Gone`, and every refusal is a `KubeError` with the API's status, reason and message.
"""

import json
from collections.abc import Iterator
from typing import Any

import requests
import urllib3

from kube.config import KubeConfig

REQUEST_TIMEOUT = 30.0


class KubeError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


class Gone(KubeError):
    """The resourceVersion a watch asked for is too old: list again."""


def _error(response: requests.Response) -> KubeError:
    try:
        body = response.json()
        reason, message = body.get("reason", ""), body.get("message", "")
    except ValueError:
        reason, message = response.reason or "", response.text[:300]
    cls = Gone if response.status_code == 410 else KubeError
    return cls(response.status_code, reason, message)


class KubeClient:
    def __init__(self, config: KubeConfig) -> None:
        self.config = config
        self.base = config.api_url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {config.token}"
        # Passed with every request: a session's own `verify` loses to REQUESTS_CA_BUNDLE.
        self.verify = config.verify
        if config.insecure:  # tests only (KUBE_INSECURE): the warning would be every call's
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

    def close(self) -> None:
        self.session.close()

    def pods_path(self, name: str = "") -> str:
        path = f"/api/v1/namespaces/{self.config.namespace}/pods"
        return f"{path}/{name}" if name else path

    def call(
        self,
        method: str,
        path: str,
        *,
        params: dict | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else {}
        response = self.session.request(
            method,
            self.base + path,
            params=params,
            data=data,
            headers=headers,
            timeout=REQUEST_TIMEOUT,
            verify=self.verify,
        )
        if response.status_code >= 400:
            raise _error(response)
        return response.json() if response.content else {}

    def list_all(self, path: str, params: dict | None = None) -> tuple[list[dict], str]:
        """Every item (pages of 500) and the list's resourceVersion."""
        items: list[dict] = []
        params = {**(params or {}), "limit": 500}
        while True:
            page = self.call("GET", path, params=params)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, meta.get("resourceVersion", "")
            params["continue"] = meta["continue"]

    def watch(
        self, path: str, params: dict, resource_version: str, timeout: int = 60
    ) -> Iterator[tuple[str, dict]]:
        """(type, object) of each event after `resource_version`, bookmarks included;
        raises Gone when that version is too old (also when the server says so in an
        ERROR event)."""
        query = {
            **params,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout,
        }
        with self.session.get(
            self.base + path,
            params=query,
            stream=True,
            timeout=(10, timeout + 15),
            verify=self.verify,
        ) as response:
            if response.status_code >= 400:
                raise _error(response)
            for line in response.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type", ""), event.get("object") or {}
                if kind == "ERROR":
                    code = int(obj.get("code") or 500)
                    cls = Gone if code == 410 else KubeError
                    raise cls(code, obj.get("reason", ""), obj.get("message", ""))
                yield kind, obj

    def log_stream(self, name: str, *, follow: bool = True) -> requests.Response:
        """The worker container's log (pods/log), with timestamps; the caller reads and
        closes the response."""
        params = {"container": "worker", "timestamps": "true", "follow": str(follow).lower()}
        response = self.session.get(
            self.base + self.pods_path(name) + "/log",
            params=params,
            stream=True,
            timeout=(10, 300),
            verify=self.verify,
        )
        if response.status_code >= 400:
            error = _error(response)
            response.close()
            raise error
        return response

    def log_tail(self, name: str, container: str, lines: int, limit_bytes: int) -> bytes:
        """The last `lines` lines of a finished container's log (timestamps stripped by the
        caller: kube.logs.strip_stamp), at most `limit_bytes`."""
        params = {
            "container": container,
            "timestamps": "true",
            "tailLines": lines,
            "limitBytes": limit_bytes,
        }
        response = self.session.get(
            self.base + self.pods_path(name) + "/log",
            params=params,
            timeout=REQUEST_TIMEOUT,
            verify=self.verify,
        )
        if response.status_code >= 400:
            raise _error(response)
        return response.content[:limit_bytes]

    def create_pod(self, manifest: dict) -> dict:
        return self.call("POST", self.pods_path(), body=manifest)

    def create_service(self, manifest: dict) -> dict:
        return self.call(
            "POST", f"/api/v1/namespaces/{self.config.namespace}/services", body=manifest
        )

    def delete_service(self, name: str) -> dict:
        return self.call("DELETE", f"/api/v1/namespaces/{self.config.namespace}/services/{name}")

    def delete_pod(self, name: str, grace: int) -> dict:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace}
        return self.call("DELETE", self.pods_path(name), body=body)

    def json_patch_pod(self, name: str, ops: list[dict]) -> dict:
        return self.call(
            "PATCH", self.pods_path(name), body=ops, content_type="application/json-patch+json"
        )

    def merge_patch_pod(self, name: str, body: dict) -> dict:
        return self.call(
            "PATCH", self.pods_path(name), body=body, content_type="application/merge-patch+json"
        )

    def allowed(self, verb: str, resource: str, *, namespace: str = "", sub: str = "") -> bool:
        """SelfSubjectAccessReview: may this token do `verb` on `resource`?"""
        attrs = {"verb": verb, "resource": resource, "group": ""}
        if namespace:
            attrs["namespace"] = namespace
        if sub:
            attrs["subresource"] = sub
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs},
        }
        path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        reply = self.call("POST", path, body=review)
        return bool((reply.get("status") or {}).get("allowed"))
