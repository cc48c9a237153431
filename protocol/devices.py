"""Which GPUs a worker sees is the agent's to say, never the job's (Django-free).

The console refuses these variables in a job's environment (jobs.admission), and the agent drops
them from whatever it is given and sets its own (agents.node.runtimes.base), so neither a
user's env nor an old stored job can widen a worker's devices. A CUDA image's own
`NVIDIA_VISIBLE_DEVICES=all` is overridden by the container's environment too.
"""

# Read by the NVIDIA container toolkit (which devices and driver parts a container gets),
# by CUDA (which of the visible devices a process uses, and how they are numbered), and by
# the other vendors' runtimes a mixed node may have.
DEVICE_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_MIG_CONFIG_DEVICES",
        "NVIDIA_MIG_MONITOR_DEVICES",
        "NVIDIA_IMEX_CHANNELS",
        "NVIDIA_GDRCOPY",
        "NVIDIA_GDS",
        "NVIDIA_MOFED",
        "NVIDIA_NVSWITCH",
        "GPU_DEVICE_ORDINAL",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
    }
)
# What a container with no GPU gets: the toolkit then injects nothing (not `all`).
NO_DEVICES = "void"
DRIVER_CAPABILITIES = "compute,utility"


def is_device_env(name: str) -> bool:
    return name in DEVICE_ENV


def without_device_env(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The env without device-visibility variables, and the names that were dropped."""
    kept = {k: v for k, v in env.items() if not is_device_env(k)}
    return kept, sorted(k for k in env if k not in kept)
