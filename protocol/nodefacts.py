"""What an agent says about its node at registration and in heartbeats: its GPUs (with MIG
devices and health marks) and the node's facts (docs/agent-protocol.md). Part of the agent
protocol (`protocol.agent` re-exports these names)."""

from typing import Annotated

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
    model_validator,
)

from protocol import limits
from protocol.base import HealthMark, Percent, ResourceTypeName, RuntimeName, Text, _FromAgent

MAX_MIG_INSTANCES = 16


class MigInstance(_FromAgent):
    """One MIG device of a GPU in MIG mode (what CUDA in a container would see)."""

    uuid: Text(limits.GPU_TEXT) = ""
    name: Text(limits.GPU_TEXT) = ""
    memory_total_mb: Annotated[int, Field(ge=0, le=10**8)] = 0
    memory_used_mb: Annotated[int, Field(ge=0, le=10**8)] = 0


class GpuReport(_FromAgent):
    index: Annotated[int, Field(ge=0, lt=limits.GPUS)]
    uuid: Text(limits.GPU_TEXT) = ""
    name: Text(limits.GPU_TEXT) = ""
    memory_total_mb: Annotated[int, Field(ge=0, le=10**8)] = 0
    memory_used_mb: Annotated[int, Field(ge=0, le=10**8)] = 0
    utilization: Percent | None = 0  # None: unknown (MIG mode, or NVML could not say)
    temperature: Annotated[int, Field(ge=-100, le=300)] | None = None
    power_watts: Annotated[float, Field(ge=0, le=100_000)] | None = None
    ecc_errors: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    healthy: bool = True
    health_reason: Text(limits.GPU_REASON) = ""
    # Additive (real GPU nodes): older agents send none of these.
    health_mark: HealthMark = 0  # an Xid mark the operator may clear (HeartbeatReply)
    pci_bus_id: Text(32) = ""
    mig_enabled: bool = False
    mig_instances: Annotated[list[MigInstance], Field(max_length=MAX_MIG_INSTANCES)] = []


class NodeFacts(_FromAgent):
    hostname: Text(255) = ""
    agent_version: Text(40) = ""
    runtime: RuntimeName = "process"
    resource_type: ResourceTypeName = "Lingjun"
    gpu_type: Text(40) = ""
    cpus: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    memory_gb: Annotated[int, Field(ge=0, le=10**7)] = 0
    gpus: Annotated[list[GpuReport], Field(max_length=limits.GPUS)] = []
    # Additive (distributed jobs, docs/distributed.md): the address the node's peers reach
    # it at (empty: the address the console sees the agent register from) and the ports it
    # lends to rendezvous, inclusive. Sent only when set: an older console refuses them.
    address: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9.:_-]{0,255}$")] = ""
    rendezvous_ports: (
        tuple[
            Annotated[int, Field(ge=limits.PORT_BOUNDS[0], le=limits.PORT_BOUNDS[1])],
            Annotated[int, Field(ge=limits.PORT_BOUNDS[0], le=limits.PORT_BOUNDS[1])],
        ]
        | None
    ) = None

    @model_serializer(mode="wrap")
    def _only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = handler(self)
        if not data.get("address"):
            data.pop("address", None)
        if data.get("rendezvous_ports") is None:
            data.pop("rendezvous_ports", None)
        return data

    @model_validator(mode="after")
    def _ports_in_order(self) -> "NodeFacts":
        ports = self.rendezvous_ports
        if ports is not None and ports[0] > ports[1]:
            raise ValueError("rendezvous_ports: the first port must not be above the last")
        return self

    @model_validator(mode="after")
    def _unique_indices(self) -> "NodeFacts":
        indices = [g.index for g in self.gpus]
        if len(indices) != len(set(indices)):
            raise ValueError("GPU indices must be unique")
        return self
