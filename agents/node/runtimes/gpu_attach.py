"""How this host attaches GPUs to containers (`--docker-gpus`), by what is actually there.

- `cdi` when the engine has CDI enabled (its info lists CDI spec folders) and knows
  `nvidia.com/gpu` devices: from the engine's own list (Docker 28+: DiscoveredDevices) or the
  CDI spec files the agent can read. UUID names are used when the spec has them, else
  index names.
- `nvidia` when Docker can serve the NVIDIA driver's request: the engine reports an `nvidia`
  runtime, or the toolkit's hook binary is installed on this host (what Docker itself looks
  for before it registers that driver).
- `off` otherwise: workers then get no GPU (and NVIDIA_VISIBLE_DEVICES=void), and the agent
  says why at start.
"""

import logging
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from agents.node.runtimes.container_config import CDI_KIND

log = logging.getLogger(__name__)

DEFAULT_CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
NVIDIA_HOOK = "nvidia-container-runtime-hook"
MAX_SPEC_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class GpuAttach:
    style: str  # nvidia | cdi | off (container_config.GPU_REQUEST_STYLES)
    cdi_names: str = "uuid"
    why: str = ""


def cdi_gpu_names(info: Mapping, spec_dirs: Iterable[Path]) -> list[str]:
    """The names after `nvidia.com/gpu=` that the engine or the CDI spec files know."""
    listed = [
        str(d.get("ID", ""))
        for d in info.get("DiscoveredDevices") or []
        if isinstance(d, dict) and d.get("Source") == "cdi"
    ]
    names = [n.split("=", 1)[1] for n in listed if n.startswith(f"{CDI_KIND}=")]
    if names:
        return names
    for folder in spec_dirs:
        try:
            paths = sorted(Path(folder).iterdir())
        except OSError:
            continue  # not there, or not visible to the agent (it may run in a container)
        for path in paths:
            if path.suffix not in (".yaml", ".yml", ".json"):
                continue
            try:
                if path.stat().st_size > MAX_SPEC_BYTES:
                    continue
                spec = yaml.safe_load(path.read_text())  # JSON is YAML
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                log.warning("CDI spec %s is unreadable: %s", path, exc)
                continue
            if not isinstance(spec, dict) or spec.get("kind") != CDI_KIND:
                continue
            for device in spec.get("devices") or []:
                if isinstance(device, dict) and isinstance(device.get("name"), str):
                    names.append(device["name"])
    return names


def choose_gpu_attach(
    requested: str,
    info: Mapping,
    *,
    spec_dirs: Iterable[Path] | None = None,
    hook_installed: bool | None = None,
) -> GpuAttach:
    """The style for `--docker-gpus <requested>` given the engine's `/info` (pure apart from
    reading the CDI spec folders and looking for the hook when not given)."""
    if requested == "off":
        return GpuAttach("off", why="--docker-gpus off")
    if requested in ("nvidia", "on"):
        return GpuAttach("nvidia", why=f"--docker-gpus {requested}")
    engine_dirs = [Path(d) for d in info.get("CDISpecDirs") or []]
    if spec_dirs is None:
        spec_dirs = engine_dirs or [Path(d) for d in DEFAULT_CDI_SPEC_DIRS]
    names = cdi_gpu_names(info, spec_dirs)
    naming = "uuid" if any(n.startswith("GPU-") for n in names) or not names else "index"
    if requested == "cdi":
        return GpuAttach("cdi", naming, why="--docker-gpus cdi")
    if engine_dirs and names:
        return GpuAttach(
            "cdi", naming, why=f"CDI is enabled and lists {len(names)} {CDI_KIND} devices"
        )
    if hook_installed is None:
        hook_installed = shutil.which(NVIDIA_HOOK) is not None
    if "nvidia" in (info.get("Runtimes") or {}):
        return GpuAttach("nvidia", why="the engine has the nvidia runtime")
    if hook_installed:
        return GpuAttach("nvidia", why=f"{NVIDIA_HOOK} is installed")
    return GpuAttach(
        "off",
        why=(
            f"no CDI spec lists {CDI_KIND} devices"
            + ("" if engine_dirs else " (or CDI is not enabled in the engine)")
            + f", the engine has no nvidia runtime and {NVIDIA_HOOK} is not installed"
        ),
    )
