"""Nodes: which are draining, and draining or uncordoning one.

Anyone authenticated sees the draining nodes of every cluster, each
``draining`` while jobs run on it and ``drained`` once the scheduler has
published it empty. Draining (no new jobs; running ones finish) and
uncordoning are the administrators'; a node is named by its cluster, which
must be one of the config (404 otherwise), and, where the cluster lists its
nodes, must be one of them (404 otherwise).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends

from flotilla.service.api.shared import AdminOnly, Api, ClusterName, NodeName, identity, require_admin
from flotilla.service.auth import Identity
from flotilla.service.errors import ApiError
from flotilla.service.guard import BoundedRoute

router = APIRouter(route_class=BoundedRoute)
admin_only = AdminOnly(router)


@router.get("/v1/nodes", tags=["nodes"], summary="Draining nodes: draining while jobs run, drained once empty")
def list_nodes(api: Api, who: Identity = Depends(identity)) -> dict:
    published = api.status.get().get("nodes", {})
    return {"nodes": {key: published.get(key, "draining") for key in sorted(api.store.cordoned("node"))}}


@admin_only.post("/v1/nodes/{cluster}/{node}/{action}", tags=["nodes"],
                 summary="Drain a node (no new jobs; running ones finish) or uncordon it (administrators)")
def drain_node(cluster: ClusterName, node: NodeName, action: Literal["drain", "uncordon"], api: Api,
               who: Identity = Depends(identity)) -> dict:
    require_admin(who)
    spec = next((c for c in api.settings.clusters if c.name == cluster), None)
    if spec is None:
        raise ApiError(404, f"cluster {cluster!r} does not exist")
    if spec.nodes and node not in {n.name for n in spec.nodes}:
        raise ApiError(404, f"node {node!r} does not exist in cluster {cluster!r}")
    api.store.set_cordon("node", f"{cluster}/{node}", action == "drain")
    return {"node": f"{cluster}/{node}", "draining": action == "drain"}


__all__ = ["router"]
