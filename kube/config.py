"""The controller's settings (console.settings, from the environment), as one value."""

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

HASH_CACHE = "kube-inputs-sha256.json"


@dataclass(frozen=True)
class KubeConfig:
    api_url: str
    token: str
    ca_file: str = ""
    insecure: bool = False
    namespace: str = "gpu-console"
    node_selector: str = ""
    gpu_resource: str = "nvidia.com/gpu"
    gpu_type: str = "H200"
    resource_type: str = "Lingjun"
    sync_interval: float = 2.0
    checkpoint_claim: str = ""
    checkpoint_hostpath: str = ""
    checkpoint_mount: str = "/checkpoints"
    checkpoint_root: str = ""  # where the console sees the same volume ("" : not scanned)
    # The content hashes' cache (kube.hashing), a private file of the console's var dir
    # ("" : kept in memory only).
    hash_cache: str = ""

    @property
    def verify(self) -> bool | str:
        if self.insecure:
            return False
        return self.ca_file or True


def enabled() -> bool:
    return bool(getattr(settings, "KUBE_API_URL", ""))


def _token() -> str:
    if settings.KUBE_TOKEN:
        return settings.KUBE_TOKEN
    path = Path(settings.KUBE_TOKEN_FILE)
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(
            f"KUBE_TOKEN is not set and the token file {path} cannot be read ({exc})"
        ) from None


def load() -> KubeConfig:
    if not enabled():
        raise ImproperlyConfigured("KUBE_API_URL is not set: the Kubernetes backend is off")
    return KubeConfig(
        api_url=settings.KUBE_API_URL.rstrip("/"),
        token=_token(),
        ca_file=settings.KUBE_CA_FILE,
        insecure=settings.KUBE_INSECURE,
        namespace=settings.KUBE_NAMESPACE,
        node_selector=settings.KUBE_NODE_SELECTOR,
        gpu_resource=settings.KUBE_GPU_RESOURCE,
        gpu_type=settings.KUBE_GPU_TYPE,
        resource_type=settings.KUBE_RESOURCE_TYPE,
        sync_interval=float(settings.KUBE_SYNC_INTERVAL),
        checkpoint_claim=settings.KUBE_CHECKPOINT_CLAIM,
        checkpoint_hostpath=settings.KUBE_CHECKPOINT_HOSTPATH,
        checkpoint_mount=settings.KUBE_CHECKPOINT_MOUNT,
        checkpoint_root=settings.KUBE_CHECKPOINT_ROOT,
        hash_cache=str(Path(settings.VAR_DIR) / HASH_CACHE),
    )
