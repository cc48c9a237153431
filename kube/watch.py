"""A watched collection of Kubernetes objects kept in memory (docs/kubernetes.md).

List, then watch from the list's resourceVersion with bookmarks (which move the version
on while nothing of ours changes); a 410 Gone lists again and replaces the whole cache;
any other failure watches again from the last version after a pause. The thread only
reads the API and fills the cache (no database): the controller's loop reads snapshots.
"""

import logging
import threading
import time
from collections.abc import Callable

from kube.client import Gone, KubeClient

log = logging.getLogger(__name__)

RETRY_PAUSE = 1.0


class Watched(threading.Thread):
    def __init__(
        self,
        client: KubeClient,
        path: str,
        params: dict,
        on_change: Callable[[], None],
        *,
        name: str,
        timeout: int = 60,
    ) -> None:
        super().__init__(name=f"kube-watch-{name}", daemon=True)
        self.client, self.path, self.params = client, path, params
        self.on_change, self.timeout = on_change, timeout
        self.items: dict[str, dict] = {}
        self.version = ""
        self.lists = 0  # how many times it listed (a relist after 410 adds one)
        self.synced = threading.Event()
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def snapshot(self) -> dict[str, dict]:
        with self.lock:
            return dict(self.items)

    def relist(self) -> None:
        items, version = self.client.list_all(self.path, self.params)
        with self.lock:
            self.items = {_key(obj): obj for obj in items}
            self.version = version
            self.lists += 1
        self.synced.set()
        self.on_change()

    def _apply(self, kind: str, obj: dict) -> None:
        version = (obj.get("metadata") or {}).get("resourceVersion", "")
        with self.lock:
            if kind in ("ADDED", "MODIFIED"):
                self.items[_key(obj)] = obj
            elif kind == "DELETED":
                self.items.pop(_key(obj), None)
            if version:
                self.version = version
        if kind != "BOOKMARK":
            self.on_change()

    def run(self) -> None:
        need_list = True
        while not self.stopping.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                for kind, obj in self.client.watch(
                    self.path, self.params, self.version, self.timeout
                ):
                    self._apply(kind, obj)
                    if self.stopping.is_set():
                        return
            except Gone:
                log.info("kube watch %s: resourceVersion too old, listing again", self.path)
                need_list = True
            except Exception as exc:  # the server restarting, a dropped connection
                if self.stopping.is_set():
                    return
                log.warning("kube watch %s failed (%s); retrying", self.path, exc)
                time.sleep(RETRY_PAUSE)

    def stop(self) -> None:
        self.stopping.set()


def _key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
