"""Admission facts cached per process (docs/processes.md, "Caches"): the quota with its
tenant's GPUs, the caller's workspaces bound to it, its node pool and its tree, kept under
one version counter in Redis (`accounts.versions`). Any write of what they are read from
makes every process read them again once it commits:

- a save or delete of a tenant, quota, workspace, membership or node (Django's signals:
  every change of `quotas.actions`, the admin's edits, a node's registration), a binding
  of a workspace to quotas (`m2m_changed`), and
- an UPDATE of nodes that changes their kind, size or whether they count (Lost <-> Ready:
  `cluster.actions.pool_changed`); their heartbeats' times and NotReady do not.

Without a version store (the embedded console, SQLite, tests) nothing is cached.
"""

import copy
from collections.abc import Callable, Hashable
from types import EllipsisType
from typing import Any

from django.db.models import Model

from accounts.versions import VersionedCache, bump

ADMISSION_VERSION = "admission-facts"
FACTS = VersionedCache[Any](ADMISSION_VERSION)


def stale(**kwargs: Any) -> None:
    bump(ADMISSION_VERSION)


def install() -> None:
    """Connect the writes that make the cached facts stale (once, from JobsConfig.ready)."""
    from django.db.models.signals import m2m_changed, post_delete, post_save

    from cluster.actions import pool_changed
    from cluster.models import Node
    from quotas.models import Membership, Quota, Tenant, Workspace

    for model in (Tenant, Quota, Workspace, Membership, Node):
        uid = f"admission-facts-{model.__name__}"
        post_save.connect(stale, sender=model, weak=False, dispatch_uid=uid)
        post_delete.connect(stale, sender=model, weak=False, dispatch_uid=f"{uid}-d")
    m2m_changed.connect(
        stale, sender=Workspace.quotas.through, weak=False, dispatch_uid="admission-facts-bind"
    )
    pool_changed.connect(stale, weak=False, dispatch_uid="admission-facts-pool")


def own(value: Any) -> Any:
    """A request's own copy of cached rows (it may set attributes on them)."""
    if isinstance(value, Model):
        return copy.copy(value)
    if isinstance(value, list):
        return [own(item) for item in value]
    return value


class Versioned:
    """The cache as one request (or one batch) sees it: the version read once, before the
    first row it covers."""

    def __init__(self) -> None:
        self._version: bytes | EllipsisType | None = ...

    def get(self, key: Hashable, load: Callable[[], Any]) -> Any:
        if self._version is ...:
            self._version = FACTS.version()
        value = FACTS.get(key, load, version=self._version)
        return value if self._version is None else own(value)
