"""Queues: list, describe, create, update, delete, cordon and uncordon; a queue's head with its reasons.

Anyone authenticated lists the queues (each with its parent, whether it is
cordoned, and its placement) and describes one (its settings and job counts
by state). Creating, updating, deleting, cordoning and uncordoning are the
administrators' (:class:`~flotilla.service.api.shared.AdminRoute`: 401, then
403, before the body is read). A queue made through the API is top-level,
with no floor of its own under preemption: both come from the config file,
so the body refuses them. Deleting a queue with active jobs is refused
(409) unless ``force`` cancels them first. A cordoned queue accepts jobs
and schedules nothing new. A retiring queue (``retiring``: it left the
config file with unfinished jobs, see :mod:`flotilla.service.store.queues`)
takes no new job, runs the ones it has, and is removed once they finish.

A queue's pending head (its queued jobs in scheduling order, with reasons
and positions as of the last cycle) is its owners' and administrators'
only: to anyone else it answers 404, as for a missing queue.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import Field

from flotilla.config.models import QueueConfig
from flotilla.service import access
from flotilla.service.api.shared import AdminOnly, Api, QueueName, identity, query_integer, require_admin
from flotilla.service.auth import Identity
from flotilla.service.bounds import ID_PATTERN, StrictFloat
from flotilla.service.errors import ApiError
from flotilla.service.guard import BoundedRoute
from flotilla.service.openapi import QueuePending
from flotilla.service.pending import DEFAULT_LIMIT, HEAD_MAX
from flotilla.service.placement import placement_of, queue_parents
from flotilla.service.settings import QueueSpec, rule_dicts

#: A resource name (Kubernetes' qualified name) as JSON Schema states it: a limit's key.
RESOURCE_NAME_SCHEMA = {"maxLength": 317, "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                                                     r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"}


class QueueBody(QueueConfig):
    """A queue as the API takes it: the config's queue, with a name safe for URLs."""

    name: str = Field(min_length=1, max_length=255, pattern=ID_PATTERN)
    #: A JSON number (not a string or a boolean), as the schema says.
    weight: StrictFloat = Field(1.0, gt=0)
    #: Fractions of the pool per resource name, stated in the schema as the config's validator checks them.
    limits: dict[str, Annotated[StrictFloat, Field(gt=0, le=1)]] = Field(
        default_factory=dict, json_schema_extra={"propertyNames": RESOURCE_NAME_SCHEMA})
    #: Hierarchies come from the config file; a queue made through the API is top-level (a parent is refused).
    parent: None = Field(None, description="always null: parent queues are set in the config file")
    #: Likewise a queue's own floor under preemption to fair share (the service keeps none for API queues).
    protected_fraction_of_fair_share: None = Field(
        None, alias="protectedFractionOfFairShare",
        description="always null: a queue's own protected fraction of fair share is set in the config file")

    def spec(self) -> QueueSpec:
        return self.spec_for(self.name)

    def spec_for(self, name: str) -> QueueSpec:
        return QueueSpec(name, self.weight, dict(self.limits), tuple(self.owners), tuple(self.group_owners),
                         tuple(self.namespaces), retry_policy=rule_dicts(self.retry_policy))


class QueueUpdateBody(QueueBody):
    """A queue's new settings; the path names the queue, so the body need not (readOnly: clients leave it out)."""

    name: str | None = Field(None, min_length=1, max_length=255, pattern=ID_PATTERN,
                             description="the queue's name: the path's; when sent, it must equal the path's",
                             json_schema_extra={"readOnly": True})


router = APIRouter(route_class=BoundedRoute)
admin_only = AdminOnly(router)


@router.get("/v1/queues", tags=["queues"], summary="Every queue")
def list_queues(api: Api, who: Identity = Depends(identity)) -> dict:
    settings = api.settings
    cordoned = api.store.cordoned("queue")
    specs = api.store.list_queues()
    parents = queue_parents(settings.queues, settings.placement, specs)
    return {"queues": [{**q.to_dict(), "parent": parents.get(q.name), "cordoned": q.name in cordoned,
                        "retiring": q.retiring is not None,
                        "placement": placement_of(settings.queues, settings.placement, q)} for q in specs]}


@admin_only.post("/v1/queues", tags=["queues"], summary="Create a queue (administrators)")
def create_queue(body: QueueBody, api: Api, who: Identity = Depends(identity)) -> dict:
    require_admin(who)
    return api.store.create_queue(body.spec()).to_dict()


def _set_cordon(api, name: str, who: Identity, cordon: bool) -> dict:
    require_admin(who)
    if api.store.get_queue(name) is None:
        raise ApiError(404, f"queue {name!r} does not exist")
    api.store.set_cordon("queue", name, cordon)
    return {"queue": name, "cordoned": cordon}


# Two fixed paths, so that no other method or word after a queue's name (``GET .../pending``) is taken for an action.
@admin_only.post("/v1/queues/{name}/cordon", tags=["queues"],
                 summary="Cordon a queue: it accepts jobs, schedules nothing new (administrators)")
def cordon_queue(name: QueueName, api: Api, who: Identity = Depends(identity)) -> dict:
    return _set_cordon(api, name, who, True)


@admin_only.post("/v1/queues/{name}/uncordon", tags=["queues"],
                 summary="Uncordon a queue: its jobs are scheduled again (administrators)")
def uncordon_queue(name: QueueName, api: Api, who: Identity = Depends(identity)) -> dict:
    return _set_cordon(api, name, who, False)


@router.get("/v1/queues/{name}", tags=["queues"], summary="A queue and its job counts by state")
def describe_queue(name: QueueName, api: Api, who: Identity = Depends(identity)) -> dict:
    queue = api.queue_for(name, who, act=False)
    return {**queue.to_dict(), "retiring": queue.retiring is not None, "jobs": api.store.queue_counts(name)}


@router.get("/v1/queues/{name}/pending", tags=["queues"], response_model=QueuePending,
            summary="The queue's queued jobs in scheduling order, with reasons and positions (owners, administrators)",
            description="Positions and reasons as of the last cycle (`cycle`, `time`); a job that has left the "
                        "queue since is not listed, so positions may skip numbers. To anyone who may not act in "
                        "the queue it answers 404, as for a missing queue.")
def queue_pending(name: QueueName, api: Api,
                  limit: query_integer("at most this many jobs, from the head", ge=1, le=HEAD_MAX) = DEFAULT_LIMIT,
                  who: Identity = Depends(identity)) -> dict:
    access.owned_queue(api.store, name, who)
    return api.pending.queue(name, limit)


@admin_only.put("/v1/queues/{name}", tags=["queues"], summary="Update a queue (administrators)")
def update_queue(name: QueueName, body: QueueUpdateBody, api: Api, who: Identity = Depends(identity)) -> dict:
    require_admin(who)
    if body.name is not None and body.name != name:
        raise ApiError(422, f"body names queue {body.name!r}, path names {name!r}", field="name")
    return api.store.update_queue(body.spec_for(name)).to_dict()


@admin_only.delete("/v1/queues/{name}", tags=["queues"],
                   summary="Delete a queue and its history (administrators); ?force=true cancels its jobs first")
def delete_queue(name: QueueName, api: Api, force: bool = False, who: Identity = Depends(identity)) -> dict:
    require_admin(who)
    return api.store.delete_queue(name, force=force, by=who.user)


__all__ = ["router", "QueueBody", "QueueUpdateBody", "RESOURCE_NAME_SCHEMA"]
