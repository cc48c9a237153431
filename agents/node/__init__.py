"""The node agent: the program that runs on every GPU node (`python -m agents.node`, or the
`gpu-agent` script). It registers, heartbeats, runs workers through a runtime (containers or
local processes), ships their logs and obeys the console's desired state.

Imports nothing from Django or the console: only `protocol` (the shared schemas), the
standard library, requests, pydantic, and (for real GPUs and containers) nvidia-ml-py and
the docker SDK.
"""
