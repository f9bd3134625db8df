"""A submitted podSpec, checked against the Kubernetes schema: the official client's own models.

:class:`PodSpec` *is* the official client's ``V1PodSpec`` (pydantic v2,
unknown fields forbidden, every nested object typed), so a typo anywhere in
a podSpec (``contianers``, ``containers[0].imagee``) is refused at
submission with its field path, exactly as the API server would refuse the
pod later, but before anything is stored. What Flotilla changes on top:

* quantities written as YAML numbers (``cpu: 1``) are taken as the strings
  Kubernetes means by them;
* ``terminationGracePeriodSeconds`` and ``activeDeadlineSeconds`` may be
  fractions here: the job spec's rules (:mod:`flotilla.service.jobspec`)
  check them and the pod gets whole seconds;
* the fields the scheduler owns are refused: ``nodeName`` (the scheduler
  binds), ``schedulerName`` (the cluster's setting), and
  ``restartPolicy: Always`` (a batch job must end).

The podSpec is stored as :func:`stored_pod_spec` writes it (the API's own
field names) and reaches the pod unchanged but for those owned fields
(:func:`flotilla.kubernetes.pods.pod_manifest`).
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.models import V1Container, V1PodSpec
from pydantic import Field, field_validator, model_validator

#: restartPolicy values a batch job may use (Kubernetes also knows Always: refused).
RESTART_POLICIES = ("Never", "OnFailure")


def _quantity_text(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _quantities_as_text(spec: dict) -> dict:
    """A copy of ``spec`` whose container requests and limits (and overhead) hold strings where YAML gave numbers."""
    out = dict(spec)
    for group in ("containers", "initContainers", "init_containers"):
        containers = out.get(group)
        if not isinstance(containers, list):
            continue
        fixed = []
        for container in containers:
            resources = container.get("resources") if isinstance(container, dict) else None
            if isinstance(resources, dict):
                resources = {key: ({k: _quantity_text(v) for k, v in value.items()} if isinstance(value, dict)
                                   else value) for key, value in resources.items()}
                container = {**container, "resources": resources}
            fixed.append(container)
        out[group] = fixed
    if isinstance(out.get("overhead"), dict):
        out["overhead"] = {k: _quantity_text(v) for k, v in out["overhead"].items()}
    return out


class PodSpec(V1PodSpec):
    """A Kubernetes pod spec as a job may give it (see the module docstring)."""

    containers: list[V1Container] = Field(min_length=1)
    termination_grace_period_seconds: float | None = Field(None, alias="terminationGracePeriodSeconds")
    active_deadline_seconds: float | None = Field(None, alias="activeDeadlineSeconds")

    @model_validator(mode="before")
    @classmethod
    def _numbers_as_quantities(cls, data: Any) -> Any:
        return _quantities_as_text(data) if isinstance(data, dict) else data

    @field_validator("restart_policy")
    @classmethod
    def _batch_restart_policy(cls, value: str | None) -> str | None:
        if value is not None and value not in RESTART_POLICIES:
            if value == "Always":
                raise ValueError("restartPolicy Always is refused: a batch job must end (use Never, the default, "
                                 "or OnFailure)")
            raise ValueError(f"expected one of {', '.join(RESTART_POLICIES)}, got {value!r}")
        return value

    @field_validator("node_name")
    @classmethod
    def _scheduler_binds(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError("nodeName is set by the scheduler: leave it out (use nodeSelector to choose nodes)")
        return value

    @field_validator("scheduler_name")
    @classmethod
    def _scheduler_is_flotilla(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError("schedulerName is set by Flotilla from its cluster settings: leave it out")
        return value


def stored_pod_spec(spec: PodSpec) -> dict:
    """The podSpec as stored and sent: the API's field names, only the fields the user gave."""
    return spec.model_dump(by_alias=True, exclude_unset=True, mode="json")


__all__ = ["PodSpec", "RESTART_POLICIES", "stored_pod_spec"]
