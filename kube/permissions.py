"""The start-up check: may the controller's token do what the controller does?
(SelfSubjectAccessReview per permission; deploy/kubernetes/rbac.yaml grants them.)"""

from kube.client import KubeClient, KubeError
from kube.config import KubeConfig


class MissingPermissions(RuntimeError):
    """The controller's service account lacks permissions: the message lists them."""


def needed(config: KubeConfig) -> list[tuple[str, str, str, str]]:
    """(verb, resource, subresource, namespace) the controller uses."""
    ns = config.namespace
    pods = [(verb, "pods", "", ns) for verb in ("create", "delete", "get", "list", "watch")]
    return [
        *pods,
        ("patch", "pods", "", ns),  # its finalizer
        ("get", "pods", "log", ns),
        ("create", "pods", "eviction", ns),
        ("create", "events", "", ns),
        ("create", "services", "", ns),  # a headless Service per job (its workers' DNS names)
        ("delete", "services", "", ns),
        ("list", "nodes", "", ""),
        ("watch", "nodes", "", ""),
        ("list", "pods", "", ""),  # every namespace: the GPUs other pods hold
        ("watch", "pods", "", ""),
    ]


def check_permissions(client: KubeClient, config: KubeConfig) -> None:
    missing = []
    for verb, resource, sub, ns in needed(config):
        try:
            ok = client.allowed(verb, resource, namespace=ns, sub=sub)
        except KubeError as exc:
            raise MissingPermissions(
                f"Kubernetes at {config.api_url} refused the access review ({exc}); is "
                "KUBE_TOKEN (or the service account token) valid?"
            ) from None
        if not ok:
            what = f"{resource}/{sub}" if sub else resource
            where = f"in namespace {ns}" if ns else "cluster-wide"
            missing.append(f"{verb} {what} {where}")
    if missing:
        raise MissingPermissions(
            "the controller's Kubernetes account may not: "
            + "; ".join(missing)
            + " (apply deploy/kubernetes/rbac.yaml, docs/kubernetes.md)"
        )
