"""``/healthz``, ``/readyz`` and ``/metrics``: what probes and Prometheus ask every role, without a token.

* ``/healthz``: the process is alive and not shutting down (a liveness
  probe restarts it otherwise).
* ``/readyz``: the store answers a query, and for a process that
  schedules, one leader-election round has completed, so it knows whether
  it leads (a readiness probe keeps traffic away otherwise). A follower is
  ready: it is waiting by design. A process that schedules is not ready
  after ``cycle.unreadyAfterFailedCycles`` cycles in a row failed closed (a
  plugin failing where no job or queue can take the blame), until one ends well.
* ``/metrics``: :mod:`flotilla.service.metrics`.
"""

from __future__ import annotations

import threading

import sqlalchemy as sa
from fastapi import APIRouter, FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from flotilla.service.metrics import CONTENT_TYPE, Metrics
from flotilla.service.store import Store


def health_router(store: Store, role: str, metrics: Metrics, elector=None,
                  shutting_down: threading.Event | None = None, runner=None, settings=None) -> APIRouter:
    router = APIRouter(tags=["service"])

    def stopping() -> bool:
        return bool(shutting_down is not None and shutting_down.is_set())

    @router.get("/healthz", summary="Liveness: the process runs (no token needed)",
                responses={503: {"description": "Shutting down"}})
    def healthz():
        if stopping():
            return JSONResponse({"ok": False, "reason": "shutting down"}, status_code=503)
        return {"ok": True, "role": role}

    def store_reachable() -> str | None:
        try:
            with store.read() as conn:
                conn.execute(sa.text("SELECT 1"))
        except Exception as exc:  # any failure to reach the store means not ready
            return f"store unreachable: {type(exc).__name__}"
        return None

    @router.get("/readyz", summary="Readiness: the store answers; a scheduler knows whether it leads",
                responses={503: {"description": "Not ready: the store does not answer, no election round yet, or "
                                                "the last cycles failed closed"}})
    async def readyz():
        problem = "shutting down" if stopping() else await run_in_threadpool(store_reachable)
        body: dict = {"role": role}
        if elector is not None:
            body["leader"] = elector.leading
            body["identity"] = elector.identity
            if problem is None and not elector.known:
                problem = "leader election has not completed a round"
        if problem is None and runner is not None:
            limit = getattr(settings, "unready_after_failed_cycles", 3)
            if runner.failed_cycles >= limit:
                problem = f"{runner.failed_cycles} cycles in a row failed closed: {runner.failure}"
        if problem is not None:
            return JSONResponse({"ready": False, "reason": problem, **body}, status_code=503)
        return {"ready": True, **body}

    @router.get("/metrics", summary="Prometheus metrics (text exposition format)", response_class=Response,
                responses={200: {"description": "Prometheus text exposition format",
                                 "content": {"text/plain": {"schema": {"type": "string"}}}}})
    async def metrics_endpoint():
        return Response(await run_in_threadpool(metrics.render), media_type=CONTENT_TYPE)

    return router


def ops_app(router: APIRouter) -> FastAPI:
    """The scheduler role's HTTP server: only probes and metrics (it serves no API)."""
    app = FastAPI(title="Flotilla scheduler", docs_url=None, redoc_url=None)
    app.include_router(router)
    return app
