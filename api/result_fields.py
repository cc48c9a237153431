"""The job JSON's counted-results fields (docs/results.md), spread into `api.schemas.Job`."""

from pydantic import Field

RESULT_FIELDS = {
    "run_id": (str | None, Field(None, description="The run's readable id.")),
    "result_state": (
        str,
        Field("unchecked", description="accepted, rejected, unchecked or pending (running)."),
    ),
    "result_progress": (
        str,
        Field("", description="e.g. 'phase write · 5 of 8 partitions accepted · 2,500 items'."),
    ),
}
