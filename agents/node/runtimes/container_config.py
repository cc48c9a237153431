"""The container configuration the docker runtime creates, built from an allowlist (pure).

Never privileged, no host namespaces, no extra devices or capabilities, no Docker socket;
the bind mounts are the job's checkpoint folder (inside its workspace's area of the
operator-configured root, symlinks resolved first) and, read-only, the agent's fence folder
(the fence wrapper and the node's lease, agents.node.fence), whose wrapper runs the command.
`check_config` checks a configuration again right before it is used.

GPUs are attached by UUID, in one of two styles (agents.node.gpurequest picks by what the
host has):

- `nvidia`: Docker's NVIDIA driver (registered when the NVIDIA container toolkit's hook is
  installed): `Driver="nvidia"`, the UUIDs, capabilities gpu+compute+utility; the engine
  sets NVIDIA_VISIBLE_DEVICES to the same UUIDs.
- `cdi`: Container Device Interface (Docker 25+ with CDI specs, e.g. from `nvidia-ctk cdi
  generate`): `Driver="cdi"`, device names `nvidia.com/gpu=<UUID or index>`; the spec
  injects the devices, and NVIDIA_VISIBLE_DEVICES=void keeps a legacy NVIDIA runtime from
  adding any.

A container with no GPU (or with GPUs off) gets no request and NVIDIA_VISIBLE_DEVICES=void:
on a host whose default runtime is `nvidia`, a CUDA image's own `=all` would otherwise give
it every GPU. The job's env never sets these variables (protocol.devices).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from docker.types import DeviceRequest, Mount

from agents.node.fence import LEASE_NAME, MOUNT, WRAPPER_NAME
from agents.node.runtimes.base import (
    ACCEPTED_ENV,
    CHECKPOINT_ENV,
    OUTPUT_ENV,
    PROGRESS_ENV,
    RESUME_ENV,
    LaunchError,
    LaunchSpec,
    data_env,
    worker_env,
)
from protocol.devices import NO_DEVICES

LABEL = "io.gpu-console"
CHECKPOINT_MOUNT = "/checkpoints"
DATA_MOUNT = "/data"  # a job's read-only data folders: /data/<name> (docs/distributed.md)
# What the agent may put into a container's configuration; anything else is refused.
ALLOWED_KEYS = frozenset(
    {
        "image",
        "command",
        "name",
        "labels",
        "environment",
        "working_dir",
        "device_requests",
        "nano_cpus",
        "mem_limit",
        "shm_size",
        "mounts",
        "init",
        "security_opt",
        "cap_drop",
        "privileged",
        "network_mode",  # only "host", only where the operator allows it (--docker-host-network)
    }
)


class UnsafeConfig(LaunchError):
    """A container configuration outside the allowlist (a bug, never a user's choice)."""


GPU_REQUEST_STYLES = ("nvidia", "cdi", "off")
CDI_KIND = "nvidia.com/gpu"
NVIDIA_CAPABILITIES = [["gpu", "compute", "utility"]]
_GPU_UUID = re.compile(r"GPU-[A-Za-z0-9-]{1,90}")
_CDI_NAME = re.compile(rf"{re.escape(CDI_KIND)}=(GPU-[A-Za-z0-9-]{{1,90}}|\d{{1,2}})")


@dataclass(frozen=True)
class DockerOptions:
    node: str
    checkpoint_root: Path | None = None  # operator-configured; None: no checkpoint volume
    gpus: str = "nvidia"  # how GPUs are attached: GPU_REQUEST_STYLES
    cdi_names: str = "uuid"  # how the host's CDI spec names GPUs: "uuid" or "index"
    fence_dir: Path | None = None  # the fence wrapper and lease (None: no fence)
    # Workers of multi-worker jobs share the host's network (docs/distributed.md): the
    # operator's choice (--docker-host-network), off by default.
    host_network: bool = False

    def __post_init__(self) -> None:
        if self.gpus not in GPU_REQUEST_STYLES or self.cdi_names not in ("uuid", "index"):
            raise ValueError(f"unknown GPU request style {self.gpus!r}/{self.cdi_names!r}")


# The agent's host paths in a worker's environment (agents.node.progress, docs/results.md):
# mapped into the checkpoint mount for a worker, dropped for its validator.
HOST_PATH_ENVS = (CHECKPOINT_ENV, PROGRESS_ENV, RESUME_ENV, OUTPUT_ENV, ACCEPTED_ENV)


def container_name(node: str, pod_id: int, attempt: int) -> str:
    return f"gpu-{node}-pod{pod_id}-a{attempt}"[:200]


def checkpoint_folder(root: Path, folder: Path) -> Path:
    """The job's checkpoint folder, created if missing, symlinks resolved; refused when it
    resolves outside the operator's checkpoint root (or to the root itself)."""
    real_root = Path(root).resolve(strict=True)
    Path(folder).mkdir(mode=0o770, parents=True, exist_ok=True)
    real = Path(folder).resolve(strict=True)
    if not real.is_relative_to(real_root) or real == real_root:
        raise UnsafeConfig(f"checkpoint folder {folder} resolves to {real}, outside {real_root}")
    return real


def _container_path(host: str, folder: Path) -> str | None:
    """Where a host path under the checkpoint folder appears inside the container."""
    real = Path(host).resolve()
    if not real.is_relative_to(folder):
        return None
    rel = real.relative_to(folder)
    return CHECKPOINT_MOUNT if rel == Path(".") else f"{CHECKPOINT_MOUNT}/{rel}"


def gpu_request(spec: LaunchSpec, opts: DockerOptions) -> DeviceRequest | None:
    """The device request for the worker's GPUs in the host's style; None for none."""
    if opts.gpus == "off" or not spec.gpu_indices:
        return None
    if len(spec.gpu_uuids) != len(spec.gpu_indices):
        raise UnsafeConfig("GPUs are attached by UUID: the worker's GPUs have no UUIDs")
    if opts.gpus == "cdi":
        names = spec.gpu_uuids if opts.cdi_names == "uuid" else spec.gpu_indices
        return DeviceRequest(driver="cdi", device_ids=[f"{CDI_KIND}={n}" for n in names])
    return DeviceRequest(
        driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=NVIDIA_CAPABILITIES
    )


def _meets_peers(spec: LaunchSpec) -> bool:
    """A worker of a job with several workers (its rendezvous names more than one node)."""
    try:
        return int(spec.rendezvous.get("NNODES", "1")) > 1
    except ValueError:
        return False


def container_config(spec: LaunchSpec, opts: DockerOptions, checkpoints: Path | None) -> dict:
    """The complete create arguments for one worker's container (pure)."""
    env = worker_env(spec)
    # The agent's host paths (agents.node.progress) mean nothing inside: map or drop them.
    host_paths = {k: env.pop(k) for k in HOST_PATH_ENVS if k in env}
    request = gpu_request(spec, opts)
    if request is None:  # no GPU reaches this container, whatever the image says
        env.update(CUDA_VISIBLE_DEVICES="", NVIDIA_VISIBLE_DEVICES=NO_DEVICES)
    elif request["Driver"] == "cdi":
        env["NVIDIA_VISIBLE_DEVICES"] = NO_DEVICES
    labels = {
        f"{LABEL}.managed": "true",
        f"{LABEL}.node": opts.node,
        f"{LABEL}.job": str(spec.job_id),
        f"{LABEL}.pod": str(spec.pod_id),
        f"{LABEL}.attempt": str(spec.attempt),
        f"{LABEL}.epoch": str(spec.attempt),
        f"{LABEL}.rank": str(spec.rank),
        f"{LABEL}.gpus": ",".join(str(i) for i in spec.gpu_indices),
        f"{LABEL}.gpu-uuids": ",".join(spec.gpu_uuids),
        f"{LABEL}.workspace": str(spec.workspace_id),
    }
    command = ["/bin/sh", "-c", spec.command]
    if opts.fence_dir is not None:  # the wrapper stops the worker when the lease runs out
        fence = [f"{MOUNT}/{WRAPPER_NAME}", "--container", f"{MOUNT}/{LEASE_NAME}", "-", "--"]
        command = [*fence, *command]
    config: dict = {
        "image": spec.image,
        "command": command,
        "name": container_name(opts.node, spec.pod_id, spec.attempt),
        "labels": labels,
        "environment": env,
        "init": True,  # signals reach the command; zombies are reaped
        "privileged": False,
        "security_opt": ["no-new-privileges"],
    }
    if _meets_peers(spec) and opts.host_network:
        # Host networking (docs/distributed.md): gloo and NCCL open a port per peer beyond
        # MASTER_PORT, so publishing one port is not enough; the node's address is the
        # worker's, as MASTER_ADDR and TF_CONFIG name it.
        config["network_mode"] = "host"
    if request is not None:
        config["device_requests"] = [request]
    if spec.cpus:
        config["nano_cpus"] = spec.cpus * 10**9
    if spec.memory_gb:
        config["mem_limit"] = f"{spec.memory_gb}g"
        config["shm_size"] = f"{max(1, spec.memory_gb // 2)}g"  # data loaders share via /dev/shm
    mounts = []
    if opts.fence_dir is not None:
        mounts.append(
            Mount(MOUNT, str(Path(opts.fence_dir).resolve()), type="bind", read_only=True)
        )
    if checkpoints is not None:
        mounts.append(Mount(CHECKPOINT_MOUNT, str(checkpoints), type="bind"))
        for name, host in host_paths.items():
            inside = _container_path(host, checkpoints)
            if inside is not None:
                env[name] = inside
    for name, host in sorted(spec.data.items()):  # resolved in the workspace's area
        mounts.append(Mount(f"{DATA_MOUNT}/{name}", host, type="bind", read_only=True))
        env[data_env(name)] = f"{DATA_MOUNT}/{name}"
    if mounts:
        config["mounts"] = mounts
    return config


def check_config(
    config: Mapping,
    checkpoint_root: Path | None,
    fence_dir: Path | None = None,
    *,
    host_network: bool = False,
) -> None:
    """Refuse anything outside the allowlist; raises UnsafeConfig."""
    extra = set(config) - ALLOWED_KEYS
    if "network_mode" in config and (not host_network or config["network_mode"] != "host"):
        extra.add("network_mode")
    if extra:
        raise UnsafeConfig(f"container option(s) not allowed: {', '.join(sorted(extra))}")
    if config.get("privileged") is not False:
        raise UnsafeConfig("containers are never privileged")
    if set(config.get("security_opt", [])) - {"no-new-privileges"}:
        raise UnsafeConfig("only the no-new-privileges security option is allowed")
    check_devices(config.get("device_requests") or [], config.get("environment") or {})
    mounts = list(config.get("mounts", []))
    fence = [m for m in mounts if m.get("Target") == MOUNT]
    for mount in fence:
        source = Path(mount.get("Source", "")).resolve()
        if (
            fence_dir is None
            or source != Path(fence_dir).resolve()
            or mount.get("Type") != "bind"
            or not mount.get("ReadOnly")
        ):
            raise UnsafeConfig(f"only the agent's fence folder, read-only, may be at {MOUNT}")
    mounts = [m for m in mounts if m.get("Target") != MOUNT]
    if mounts and checkpoint_root is None:
        raise UnsafeConfig("no checkpoint root is configured: nothing may be mounted")
    for mount in mounts:
        target = str(mount.get("Target", ""))
        data = target.startswith(f"{DATA_MOUNT}/") and bool(mount.get("ReadOnly"))
        if mount.get("Type") != "bind" or (target != CHECKPOINT_MOUNT and not data):
            raise UnsafeConfig(
                f"only the checkpoint folder and read-only data may be mounted, not {mount}"
            )
        source = Path(mount.get("Source", "")).resolve()
        root = Path(checkpoint_root).resolve()
        if not source.is_relative_to(root) or source == root or "docker.sock" in str(source):
            raise UnsafeConfig(f"bind mount {source} is not under the checkpoint root {root}")


def check_devices(requests, env: Mapping[str, str]) -> None:
    """Exactly the two request styles, for explicit GPUs, with the matching environment;
    raises UnsafeConfig."""
    visible = env.get("NVIDIA_VISIBLE_DEVICES")
    if not requests:
        if visible != NO_DEVICES:
            raise UnsafeConfig("a container without GPUs must have NVIDIA_VISIBLE_DEVICES=void")
        return
    if len(requests) != 1:
        raise UnsafeConfig("at most one GPU device request")
    request = dict(requests[0])
    ids = request.get("DeviceIDs") or []
    if set(request) - {"Driver", "Count", "DeviceIDs", "Capabilities", "Options"}:
        raise UnsafeConfig(f"unknown device request fields: {sorted(request)}")
    if request.get("Count", 0) != 0 or request.get("Options") or not ids:
        raise UnsafeConfig("GPUs are requested by explicit device IDs only (no count, no options)")
    if len(set(ids)) != len(ids):
        raise UnsafeConfig("a GPU is requested twice")
    driver = request.get("Driver")
    if driver == "nvidia":
        if not all(isinstance(i, str) and _GPU_UUID.fullmatch(i) for i in ids):
            raise UnsafeConfig("NVIDIA device requests name GPUs by UUID")
        if request.get("Capabilities") != NVIDIA_CAPABILITIES:
            raise UnsafeConfig(f"NVIDIA device requests ask for {NVIDIA_CAPABILITIES} only")
        if visible != ",".join(ids):
            raise UnsafeConfig("NVIDIA_VISIBLE_DEVICES must name exactly the requested GPUs")
    elif driver == "cdi":
        if not all(isinstance(i, str) and _CDI_NAME.fullmatch(i) for i in ids):
            raise UnsafeConfig(f"CDI device requests name {CDI_KIND} devices only")
        if request.get("Capabilities"):
            raise UnsafeConfig("CDI device requests carry no capabilities")
        if visible != NO_DEVICES:
            raise UnsafeConfig("with a CDI request NVIDIA_VISIBLE_DEVICES must be void")
    else:
        raise UnsafeConfig(f"GPU device driver {driver!r} is not allowed")
