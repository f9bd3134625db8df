"""The lease hand-over's spec read: stored job specs to the pod templates backends create pods from.

Scheduling reads records without specs (:class:`~flotilla.service.store.QueuedJob`,
:class:`~flotilla.service.store.ActiveJob`); only when a cycle has leased
jobs onto a cluster whose backend creates real pods (``needs_templates``)
does the loop read those jobs' specs, by id and in batches
(:meth:`Store.job_specs <flotilla.service.store.Store.job_specs>`), and
hand each pod its :class:`~flotilla.core.backend.PodTemplate`.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from flotilla.core.backend import PodTemplate
from flotilla.core.capabilities import Backends
from flotilla.core.decisions import Placement
from flotilla.service.leases import job_of, pod_ids


def pod_templates(job_id: str, spec: Mapping) -> dict[str, PodTemplate]:
    """The pods of one stored job spec (as :func:`flotilla.service.jobspec.validate_jobs` stores it), by pod id."""
    pod_specs = [spec["podSpec"]] if spec.get("podSpec") is not None else list(spec.get("podSpecs") or ())
    labels = dict(spec.get("labels") or {})
    annotations = dict(spec.get("annotations") or {})
    services, ingresses = tuple(spec.get("services") or ()), tuple(spec.get("ingress") or ())
    return {pod_id: PodTemplate(pod_spec, spec.get("namespace"), labels, annotations, number,
                                *((services, ingresses) if number == 0 else ()))
            for number, (pod_id, pod_spec) in enumerate(zip(pod_ids(job_id, len(pod_specs)), pod_specs))}


def templates_for(store, backends: Mapping[str, object], starts: Mapping[str, Iterable[Placement]]
                  ) -> dict[str, PodTemplate]:
    """Pod templates for the started pods of clusters whose backend wants them (the
    :class:`~flotilla.core.capabilities.PodTemplates` capability), from one batched read."""
    capabilities = Backends.of(backends).capabilities
    wanted = {job_of(p.job.id) for cluster, placements in starts.items()
              if cluster in capabilities and capabilities[cluster].templates for p in placements}
    out: dict[str, PodTemplate] = {}
    if wanted:
        for job_id, spec in store.job_specs(wanted).items():
            out.update(pod_templates(job_id, spec))
    return out


__all__ = ["pod_templates", "templates_for"]
