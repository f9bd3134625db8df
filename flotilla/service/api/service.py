"""The service itself: liveness, the last cycle and the clusters, and the node templates' wishlist.

``/v1/health`` needs no token and answers on the event loop, never in a
worker thread, so it answers even while every worker is busy (``ok`` turns
false once the service is stopping). ``/v1/status`` shows the job counts,
the plugins failing in the leader's last cycle as published (every replica
shows the same) and, where this process runs the loop, its last cycle and
each cluster's availability. The wishlist (which node templates would
unblock which waiting jobs) is every queue's for administrators; anyone
else sees only the queues they may act in: per template their jobs, and
the nodes those jobs would need (each queue's counted alone, then summed).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from flotilla import __version__
from flotilla.service.api.shared import Api, identity
from flotilla.service.auth import Identity, may_act, may_admin
from flotilla.service.errors import ApiError
from flotilla.service.guard import BoundedRoute
from flotilla.service.store import Store

router = APIRouter(route_class=BoundedRoute)


@router.get("/v1/health", tags=["service"], summary="Liveness (no token needed)")
async def health(api: Api) -> dict:
    # On the event loop, never a worker thread: it answers even while every worker is busy.
    return {"ok": not api.stopping(), "version": __version__}


@router.get("/v1/wishlist", tags=["service"], summary="Node templates: the waiting jobs each would unblock",
            description="Administrators see every queue's jobs. Anyone else sees only the jobs of the queues they "
                        "may act in: per template their count, and the nodes those jobs would need (each queue's "
                        "counted alone, then summed); `unfit` lists only their jobs.")
def wishlist(api: Api, who: Identity = Depends(identity)) -> dict:
    body = api.status.get().get("wishlist")
    if body is None:
        raise ApiError(404, "no wishlist: the config lists no nodeTemplates, or no cycle has run yet")
    return visible_wishlist(api.store, body, who)


def visible_wishlist(store: Store, body: dict, who: Identity) -> dict:
    """The published wishlist as ``who`` may see it: everything for an administrator, else their queues'."""
    per_queue = body.get("queues", {})
    if may_admin(who):
        return {"templates": body["templates"], "unfit": body["unfit"]}
    templates = {name: {"cluster": t["cluster"], "jobs": 0, "nodes": 0} for name, t in body["templates"].items()}
    unfit: dict[str, str] = {}
    for queue in store.list_queues():
        part = per_queue.get(queue.name)
        if part is None or not may_act(who, queue):
            continue
        for name, wish in part["templates"].items():
            if name in templates:
                templates[name]["jobs"] += wish["jobs"]
                templates[name]["nodes"] += wish["nodes"]
        unfit.update(part["unfit"])
    return {"templates": templates, "unfit": dict(sorted(unfit.items()))}


@router.get("/v1/status", tags=["service"], summary="The last scheduling cycle and the clusters")
def status(api: Api, who: Identity = Depends(identity)) -> dict:
    out: dict[str, Any] = {"version": __version__, "jobs": api.store.job_counts()}
    # Plugins failing in the leader's last cycle, as published (every replica shows the same).
    out["plugins"] = api.status.get().get("plugins") or {"failing": [], "failedCycles": 0}
    loop = api.loop
    if loop is not None:
        out["cycle"] = loop.last.to_dict() if loop.last else None
        out["clusters"] = {name: {"available": caps.availability is None or bool(caps.availability.available)}
                           for name, caps in sorted(loop.backends.capabilities.items())}
    return out


__all__ = ["router", "visible_wishlist"]
