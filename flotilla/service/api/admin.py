"""Test and demo aids: stopping and starting a simulated cluster (administrators).

Served only when ``serve --admin-endpoints`` asks for them (``create_app``
includes this router then, and only then); a cluster that is not a
simulated one of this process's loop answers 404.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends

from flotilla.service.api.shared import AdminOnly, Api, ClusterName, identity, require_admin
from flotilla.service.auth import Identity
from flotilla.service.errors import ApiError
from flotilla.service.guard import BoundedRoute

router = APIRouter(route_class=BoundedRoute)
admin_only = AdminOnly(router)


@admin_only.post("/v1/admin/clusters/{name}/{action}", tags=["admin"],
                 summary="Stop or start a simulated cluster (test and demo aid; administrators)")
def cluster_control(name: ClusterName, action: Literal["stop", "start"], api: Api,
                    who: Identity = Depends(identity)) -> dict:
    require_admin(who)
    loop = api.loop
    if loop is None or not loop.set_cluster_available(name, action == "start"):
        raise ApiError(404, f"no simulated cluster {name!r}")
    return {"cluster": name, "available": action == "start"}


__all__ = ["router"]
