"""`python -m agents.node.fence`: build the worker fence wrapper into this package (install
time: `make venv`, the Dockerfile); prints its path."""

import sys

from agents.node.fence import PACKAGED, FenceUnavailable, build


def main() -> int:
    try:
        print(build(PACKAGED))
    except FenceUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
