"""The container configuration the docker runtime creates, built from an allowlist (pure).

Never privileged, no host namespaces, no extra devices or capabilities, no Docker socket;
the bind mounts are the job's checkpoint folder (inside its workspace's area of the
operator-configured root, symlinks resolved first) and, read-only, the agent's fence folder
(the fence wrapper and the node's lease, agents.node.fence), whose wrapper runs the command.
GPUs are attached by device request of the assigned indices. `check_config` checks a
configuration again right before it is used.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from docker.types import DeviceRequest, Mount

from agents.node.fence import LEASE_NAME, MOUNT, WRAPPER_NAME
from agents.node.runtimes.base import (
    CHECKPOINT_ENV,
    PROGRESS_ENV,
    RESUME_ENV,
    LaunchError,
    LaunchSpec,
    injected_env,
)

LABEL = "io.gpu-console"
CHECKPOINT_MOUNT = "/checkpoints"
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
    }
)


class UnsafeConfig(LaunchError):
    """A container configuration outside the allowlist (a bug, never a user's choice)."""


@dataclass(frozen=True)
class DockerOptions:
    node: str
    checkpoint_root: Path | None = None  # operator-configured; None: no checkpoint volume
    gpus: bool = True  # attach GPUs by device request (the engine needs the NVIDIA toolkit)
    fence_dir: Path | None = None  # the fence wrapper and lease (None: no fence)


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


def container_config(spec: LaunchSpec, opts: DockerOptions, checkpoints: Path | None) -> dict:
    """The complete create arguments for one worker's container (pure)."""
    env = {**spec.env, **injected_env(spec)}
    # The agent's host paths (agents.node.progress) mean nothing inside: map or drop them.
    host_paths = {k: env.pop(k) for k in (CHECKPOINT_ENV, PROGRESS_ENV, RESUME_ENV) if k in env}
    if opts.gpus and spec.gpu_indices:
        # The container sees only its GPUs, numbered from 0.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(spec.gpu_indices)))
    labels = {
        f"{LABEL}.managed": "true",
        f"{LABEL}.node": opts.node,
        f"{LABEL}.job": str(spec.job_id),
        f"{LABEL}.pod": str(spec.pod_id),
        f"{LABEL}.attempt": str(spec.attempt),
        f"{LABEL}.epoch": str(spec.attempt),
        f"{LABEL}.rank": str(spec.rank),
        f"{LABEL}.gpus": ",".join(str(i) for i in spec.gpu_indices),
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
    if opts.gpus and spec.gpu_indices:
        config["device_requests"] = [
            DeviceRequest(
                driver="nvidia",
                device_ids=[str(i) for i in spec.gpu_indices],
                capabilities=[["gpu"]],
            )
        ]
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
    if mounts:
        config["mounts"] = mounts
    return config


def check_config(
    config: Mapping, checkpoint_root: Path | None, fence_dir: Path | None = None
) -> None:
    """Refuse anything outside the allowlist; raises UnsafeConfig."""
    extra = set(config) - ALLOWED_KEYS
    if extra:
        raise UnsafeConfig(f"container option(s) not allowed: {', '.join(sorted(extra))}")
    if config.get("privileged") is not False:
        raise UnsafeConfig("containers are never privileged")
    if set(config.get("security_opt", [])) - {"no-new-privileges"}:
        raise UnsafeConfig("only the no-new-privileges security option is allowed")
    for request in config.get("device_requests", []):
        if request.get("Driver") != "nvidia" or not request.get("DeviceIDs"):
            raise UnsafeConfig("only NVIDIA GPUs by explicit index may be requested")
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
        if mount.get("Type") != "bind" or mount.get("Target") != CHECKPOINT_MOUNT:
            raise UnsafeConfig(f"only the checkpoint folder may be mounted, not {mount}")
        source = Path(mount.get("Source", "")).resolve()
        root = Path(checkpoint_root).resolve()
        if not source.is_relative_to(root) or source == root or "docker.sock" in str(source):
            raise UnsafeConfig(f"bind mount {source} is not under the checkpoint root {root}")
