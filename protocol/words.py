"""How a number of things is written, the same on every page, reason, log line and error:
"1 GPU", "0 GPUs", "8 H200 GPUs" (never "1 GPUs"). Django-free: the console, the agent and
the pure core all use it."""


def plural(count: float, noun: str, many: str = "") -> str:
    """`count` and the noun, in the plural unless the count is exactly 1 (`many`: an
    irregular plural). A float is written short: 2.5, 1 (not 1.0)."""
    word = noun if count == 1 else (many or noun + "s")
    number = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{number} {word}"


def gpus(count: float, kind: str = "") -> str:
    """A number of GPUs, of a kind if given: "1 GPU", "3 GPUs", "1 H200 GPU"."""
    return plural(count, f"{kind} GPU" if kind else "GPU")


def gpu_noun(count: float) -> str:
    """The word alone, for "3/4 GPUs used" and "1/1 GPU used" (agreeing with the total)."""
    return "GPU" if count == 1 else "GPUs"
