"""Prometheus metrics, served at ``/metrics`` by every role (``docs/operations.md`` lists them all).

Each process has its own registry (tests run several services in one
interpreter). Three sources:

* what this process does, observed as it happens: API requests (per route
  template, method and status code), cycles (duration per phase, jobs
  considered, scheduled, preempted, evicted), lease renewals and
  expiries, store commit latency, whether this process leads;
* the leader's last cycle, read from the store at scrape time
  (:class:`~flotilla.service.roles.status.StatusReader`): per queue fair
  share, actual share, allocation per resource, queued jobs by reason
  category (never a reason's text, which can quote job specs); each cluster
  up or down. Every replica exports the same values;
* job counts per queue and state, one grouped query on the store at scrape
  time (by the ``(state, queue)`` index).

Every label takes its values from a bounded set (:mod:`.labels`): a request's
method, a job's spec or any other text a client chooses never becomes a
label value. ``/metrics`` asks for no token (Prometheus scrapes it), so what
it shows is what any client that reaches the port may read:
``docs/operations.md`` says what that is.
"""

from __future__ import annotations

import time
from typing import Iterable

import sqlalchemy as sa
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from flotilla.service.metrics.labels import method_label
from flotilla.service.roles.status import StatusReader, reason_codes
from flotilla.service.schema import jobs
from flotilla.service.store import ACTIVE, QUEUED, Store

log = structlog.get_logger("flotilla.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The states counted per queue by ``flotilla_queue_jobs``.
COUNTED_STATES = (QUEUED, *ACTIVE)
#: Loop phases (CycleReport.timings) and the scheduler's own (Decisions.timings), as ``phase`` labels.
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class StoreCollector(Collector):
    """Gauges read at scrape time: the leader's published cycle and the job counts."""

    def __init__(self, store: Store, status: StatusReader):
        self.store = store
        self.status = status

    def collect(self) -> Iterable:
        # A store that cannot be read now (a failover, a lost connection) leaves these gauges out of this scrape;
        # the process's own metrics still answer, never a 500 for the whole exposition.
        try:
            yield from self._collect()
        except sa.exc.SQLAlchemyError as exc:
            log.warning("metrics.store_unreadable", error=str(exc).splitlines()[0][:200])

    def _collect(self) -> Iterable:
        body = self.status.get()
        fair = GaugeMetricFamily("flotilla_queue_fair_share", "The queue's fair share in the last cycle (0..1)",
                                 labels=["queue"])
        share = GaugeMetricFamily("flotilla_queue_share", "The queue's actual share after the last cycle (0..1)",
                                  labels=["queue"])
        weight = GaugeMetricFamily("flotilla_queue_weight", "The queue's weight in the last cycle", labels=["queue"])
        allocated = GaugeMetricFamily("flotilla_queue_allocated",
                                      "Resources allocated to the queue after the last cycle (cpu in cores, others in "
                                      "base units)", labels=["queue", "resource"])
        for name, q in body.get("queues", {}).items():
            fair.add_metric([name], q["fairShare"])
            share.add_metric([name], q["share"])
            weight.add_metric([name], q["weight"])
            for resource, value in sorted(q["allocated"].items()):
                allocated.add_metric([name, resource], value)
        reasons = GaugeMetricFamily("flotilla_queue_queued_jobs_by_reason",
                                    "Queued jobs after the last cycle, by the category of why they were not "
                                    "scheduled (the reasons' text is on the dashboard, for the queue's owners)",
                                    labels=["queue", "reason"])
        for name in sorted(body.get("reasons", {})):
            for code, count in sorted(reason_codes(body, name).items()):
                reasons.add_metric([name, code], count)
        up = GaugeMetricFamily("flotilla_cluster_up", "1 if the cluster answered in the last cycle, else 0",
                               labels=["cluster"])
        for name, answered in body.get("clusters", {}).items():
            up.add_metric([name], 1.0 if answered else 0.0)
        last = GaugeMetricFamily("flotilla_last_cycle_timestamp_seconds",
                                 "When the leader's last published cycle started (Unix time)")
        if body:
            last.add_metric([], body["time"])
        counts = GaugeMetricFamily("flotilla_queue_jobs", "Jobs per queue and state (queued, leased, pending, running)",
                                   labels=["queue", "state"])
        with self.store.read() as conn:
            rows = conn.execute(sa.select(jobs.c.queue, jobs.c.state, sa.func.count())
                                .where(jobs.c.state.in_(COUNTED_STATES)).group_by(jobs.c.queue, jobs.c.state)).all()
        found = {(q, s): n for q, s, n in rows}
        for queue in sorted({q for q, _ in found} | set(body.get("queues", {}))):
            for state in COUNTED_STATES:
                counts.add_metric([queue, state], found.get((queue, state), 0))
        wished_jobs = GaugeMetricFamily("flotilla_wishlist_jobs", "Waiting jobs a node template would unblock "
                                        "(after the last cycle)", labels=["template", "cluster"])
        wished_nodes = GaugeMetricFamily("flotilla_wishlist_nodes", "Nodes of the template that would run all of "
                                         "those jobs", labels=["template", "cluster"])
        for name, wish in sorted(body.get("wishlist", {}).get("templates", {}).items()):
            wished_jobs.add_metric([name, wish["cluster"]], wish["jobs"])
            wished_nodes.add_metric([name, wish["cluster"]], wish["nodes"])
        yield from (fair, share, weight, allocated, reasons, up, last, counts, wished_jobs, wished_nodes)


class Metrics:
    """One process's metrics; ``render()`` is the ``/metrics`` body."""

    def __init__(self, store: Store, role: str = "all"):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("flotilla_api_requests", "API requests", ["route", "method", "code"], registry=r)
        self.errors = Counter("flotilla_api_errors", "API requests answered with a 4xx or 5xx status",
                              ["route", "method", "code"], registry=r)
        self.latency = Histogram("flotilla_api_request_seconds", "API request latency (to the response's start)",
                                 ["route", "method"], registry=r)
        self.cycle_seconds = Histogram("flotilla_cycle_seconds", "Duration of a whole scheduling cycle",
                                       buckets=CYCLE_BUCKETS, registry=r)
        self.phase_seconds = Histogram("flotilla_cycle_phase_seconds", "Duration of each phase of a cycle", ["phase"],
                                       buckets=CYCLE_BUCKETS, registry=r)
        self.cycles = Counter("flotilla_cycles", "Scheduling cycles run to the end by this process", registry=r)
        self.considered = Counter("flotilla_cycle_jobs_considered", "Jobs the allocate action examined", registry=r)
        self.scheduled = Counter("flotilla_cycle_jobs_scheduled", "Jobs leased to a cluster", registry=r)
        self.preempted = Counter("flotilla_cycle_jobs_preempted", "Running jobs preempted", registry=r)
        self.evicted = Counter("flotilla_cycle_jobs_evicted", "Jobs the evict action took off their node", registry=r)
        self.renewed = Counter("flotilla_leases_renewed", "Job leases renewed by a cluster's report", registry=r)
        self.expired = Counter("flotilla_leases_expired", "Job leases that expired (lost or not renewed)", registry=r)
        self.returned = Counter("flotilla_binds_returned", "Jobs returned to their queue, no retry used: a bind "
                                "that no longer fitted its node's live view, or a kubelet's admission refusal "
                                "(reason: Insufficient <resource>, Too many pods, or the kubelet's reason)",
                                ["cluster", "reason"], registry=r)
        self.commit_seconds = Histogram("flotilla_store_commit_seconds", "Commit latency of the store's write "
                                        "transactions", registry=r)
        self.leader = Gauge("flotilla_scheduler_leader", "1 if this process leads the scheduling, else 0",
                            ["identity"], registry=r)
        self.term = Gauge("flotilla_scheduler_term", "The leader term this process holds (0 when following)",
                          registry=r)
        self.fenced = Counter("flotilla_scheduler_fenced_writes", "Writes refused because this process had lost "
                              "the lead", registry=r)
        self.info = Gauge("flotilla_role_info", "The role of this process", ["role"], registry=r)
        self.plugin_errors = Counter("flotilla_plugin_errors", "Failures of a plugin at an extension point or hook "
                                     "(it raised, or answered what the point does not allow)", ["plugin", "point"],
                                     registry=r)
        self.info.labels(role).set(1)
        self.status = StatusReader(store)
        r.register(StoreCollector(store, self.status))
        store.on_commit = self.commit_seconds.observe

    def observe_request(self, route: str, method: str, code: int, seconds: float) -> None:
        """Count one request; ``route`` must be a route template, ``method`` is reduced to a bounded set."""
        method = method_label(method)
        self.requests.labels(route, method, str(code)).inc()
        if code >= 400:
            self.errors.labels(route, method, str(code)).inc()
        self.latency.labels(route, method).observe(seconds)

    def observe_cycle(self, report, decisions) -> None:
        self.cycles.inc()
        self.cycle_seconds.observe(report.seconds)
        for phase, seconds in report.timings.items():
            self.phase_seconds.labels(phase).observe(seconds)
        counters = decisions.counters if decisions is not None else {}
        if decisions is not None:
            for phase, seconds in decisions.timings.items():
                if phase != "total":
                    self.phase_seconds.labels(phase).observe(seconds)
        self.considered.inc(counters.get("considered", 0))
        self.scheduled.inc(report.leased)
        self.preempted.inc(report.preempted)
        self.evicted.inc(counters.get("evicted", 0))
        self.renewed.inc(report.counts.get("lease-renewed", 0))
        self.expired.inc(report.counts.get("lease-expired", 0))
        for (cluster, reason), count in getattr(report, "returned", {}).items():
            self.returned.labels(cluster, reason).inc(count)

    def observe_plugin_errors(self, errors: dict) -> None:
        """Count a cycle's plugin failures, ``(plugin, point, error) -> count``, by plugin and point (the plugin
        names come from the config and the points from a fixed list: bounded labels; the error text is not one)."""
        for (plugin, point, _), count in errors.items():
            self.plugin_errors.labels(plugin, point).inc(count)

    def set_leader(self, identity: str, leading: bool, term: int | None) -> None:
        self.leader.labels(identity).set(1 if leading else 0)
        self.term.set(term or 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def instrument(app, metrics: Metrics) -> None:
    """Count and time every request of ``app`` by its route template (``/v1/jobs/{job_id}``, not the id)."""

    @app.middleware("http")
    async def _observe(request, call_next):
        started = time.perf_counter()
        code = 500
        try:
            response = await call_next(request)
            code = response.status_code
            return response
        finally:
            route = request.scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            metrics.observe_request(path, request.method, code, time.perf_counter() - started)
