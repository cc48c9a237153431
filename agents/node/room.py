"""Before a long run (docs/results.md): a worker's output folder must have the free space its
job expects (`expected_output_gb`, else limits.OUTPUT_FREE_FLOOR_MB) when the agent starts
it (the rule, shared with the Kubernetes controller: protocol.freespace); short of that the
agent refuses the start on this node. A node's condition, not the job's failure: the report
says `ended_by: node_refused`, and the console tries the job on another node without using
its restart budget. A worker that would resume a run whose code or program changed since its
accepted units were made is refused too (`ended_by: resume_refused`,
protocol.units.resume_refusal): the job's condition, never retried."""

from protocol.agent import NODE_REFUSED, RESUME_REFUSED
from protocol.freespace import free_space_problem

__all__ = ["NodeRefused", "ResumeRefused", "free_space_problem"]


class NodeRefused(Exception):
    """The start is refused on this node (WorkerReport.ended_by)."""

    ended_by: str = NODE_REFUSED


class ResumeRefused(NodeRefused):
    """The start is refused on every node: the run it would resume changed."""

    ended_by = RESUME_REFUSED
