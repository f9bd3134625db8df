"""The OpenAPI document says what the API accepts: rules the models leave implicit, stated in the schema.

The API refuses some values everywhere, before any model sees them
(:func:`flotilla.service.bounds.load_json` and the request guard): a NUL in
any string, object key, path or query parameter, and an integer outside
64 bits. A JSON Schema cannot say "every string" once, so
:func:`state_input_rules` walks what a client sends (parameters and request
bodies, and the components they reference) and gives

* every string without a pattern (or an enum, a const) :data:`TEXT_PATTERN`,
  and every map (``additionalProperties``) the same rule for its keys;
* every integer without bounds the 64-bit range of
  :data:`~flotilla.service.bounds.INT64_MIN`..:data:`~flotilla.service.bounds.INT64_MAX`.

Responses keep their schemas as they are: an error answer may quote the
refused value. A client (or schemathesis) generating from the document then
sends only what the API takes.

The answers whose shape the document states are modelled here
(:class:`QueuePending`, ``GET /v1/queues/{name}/pending``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from flotilla.service.bounds import INT64_MAX, INT64_MIN

#: A string the API takes anywhere: no NUL (the store's text columns cannot hold one; PostgreSQL refuses it).
TEXT_PATTERN = r"^[^\x00]*$"

_CONSTRAINED = ("pattern", "enum", "const")
_NOT_SCHEMAS = ("example", "examples", "default", "const", "enum")
_REF = "#/components/schemas/"


def _has_type(node: dict, kind: str) -> bool:
    found = node.get("type")
    return found == kind or (isinstance(found, list) and kind in found)


def _refine(node: dict) -> None:
    if _has_type(node, "string") and not any(key in node for key in _CONSTRAINED):
        node["pattern"] = TEXT_PATTERN
    if _has_type(node, "integer"):
        if "minimum" not in node and "exclusiveMinimum" not in node:
            node["minimum"] = INT64_MIN
        if "maximum" not in node and "exclusiveMaximum" not in node:
            node["maximum"] = INT64_MAX
    if isinstance(node.get("additionalProperties"), dict) and "propertyNames" not in node:
        node["propertyNames"] = {"pattern": TEXT_PATTERN}


class PendingJob(BaseModel):
    """One queued job of a queue's head: where it stands and why it waits."""

    position: int = Field(ge=1, description="1: the job the queue offers next (as of the last cycle)")
    id: str
    jobSet: str
    priority: int
    priorityClass: str
    submitted: float
    reason: str = Field(description="why the last cycle left it queued, in kube-scheduler's words for nodes")
    reasonCode: str = Field(description="the reason's code, what programs read to tell reasons apart (the "
                                        "`reason` label of flotilla_queue_queued_jobs_by_reason); the words "
                                        "may change between releases, the codes do not")


class QueuePending(BaseModel):
    """A queue's queued jobs in scheduling order, from the head."""

    queue: str
    cycle: int | None = Field(description="the cycle the positions and reasons are from; null before the first")
    time: float | None = Field(description="when that cycle started (Unix seconds)")
    queued: int = Field(ge=0, description="the queue's queued jobs now")
    jobs: list[PendingJob]


def state_input_rules(document: dict[str, Any]) -> dict[str, Any]:
    """State the rules above in ``document`` (an OpenAPI document), in place; returns it."""
    components = document.get("components", {}).get("schemas", {})
    stack: list[Any] = []
    for item in document.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict):
                stack.append([p.get("schema") for p in operation.get("parameters", ())])
                stack.append(operation.get("requestBody"))
    done: set[int] = set()
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict) or id(node) in done:
            continue
        done.add(id(node))
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF) and ref[len(_REF):] in components:
            stack.append(components[ref[len(_REF):]])
        _refine(node)
        stack.extend(value for key, value in node.items() if key not in _NOT_SCHEMAS)
    return document


__all__ = ["PendingJob", "QueuePending", "TEXT_PATTERN", "state_input_rules"]
