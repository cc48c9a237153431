"""OpenAPI links: a response that names a job (a created one, a restarted one's successor,
a list's first) links to every operation that takes a job (its GET, logs, events, restarts,
checkpoints, metrics, why-pending, expected start, stop, restart, terminate) and to its
quota's; a quota list to the quota's operations, a node list to the node's. A client
follows them instead of building URLs (Schemathesis' stateful phase does).

Added to the document django-ninja generates (`api.main.ConsoleApi`), from two facts:
which response schemas name what (`NAMED_BY`, JSON pointers into the body) and which path
parameter each operation takes. A new operation taking `{job_id}` gets its link from every
job response without a line here.
"""

from typing import Any

# Response schema → the path parameters its body names, as JSON pointers (RFC 6901).
NAMED_BY: dict[str, dict[str, str]] = {
    "JobDetail": {"job_id": "/id", "ref": "/quota/id"},
    "JobList": {"job_id": "/jobs/0/id", "ref": "/jobs/0/quota/id"},
    "JobPage": {"job_id": "/jobs/0/id", "ref": "/jobs/0/quota/id"},
    "BatchResult": {"job_id": "/jobs/0/id", "ref": "/jobs/0/quota/id"},
    "QuotaList": {"ref": "/quotas/0/id"},
    "NodeList": {"name": "/nodes/0/name"},
}
# The object each path parameter names (the link's name when the path ends with it).
NOUNS = {"job_id": "job", "ref": "quota", "name": "node"}
_SCHEMAS = "#/components/schemas/"


def _targets(document: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Path parameter → (link name, operationId) of each operation taking just that one."""
    targets: dict[str, list[tuple[str, str]]] = {}
    for path, operations in document["paths"].items():
        for operation in operations.values():
            taken = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
            if len(taken) != 1 or taken[0] not in NOUNS:
                continue
            tail = path.rsplit("}", 1)[-1].strip("/")
            name = tail or NOUNS[taken[0]]
            targets.setdefault(taken[0], []).append((name, operation["operationId"]))
    return targets


def _links(named: dict[str, str], targets, source: str) -> dict[str, Any]:
    links = {}
    for parameter, pointer in named.items():
        for name, operation_id in targets.get(parameter, []):
            if operation_id == source:
                continue
            noun = NOUNS[parameter]
            key = name if parameter == "job_id" or name == noun else f"{noun}-{name}"
            links[key] = {
                "operationId": operation_id,
                "parameters": {parameter: f"$response.body#{pointer}"},
                "description": f"The {noun} this response names ({pointer}).",
            }
    return links


def add_links(document: dict[str, Any]) -> dict[str, Any]:
    """Each response whose schema names jobs, quotas or nodes gets its `links`."""
    targets = _targets(document)
    for operations in document["paths"].values():
        for operation in operations.values():
            for status, response in operation["responses"].items():
                if not str(status).startswith("2"):
                    continue
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                ref = (schema or {}).get("$ref", "")
                named = NAMED_BY.get(ref.removeprefix(_SCHEMAS))
                links = _links(named, targets, operation["operationId"]) if named else None
                if links:
                    response["links"] = links
    return document
