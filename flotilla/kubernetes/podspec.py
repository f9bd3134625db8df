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
* a field is spelt as in the Kubernetes API (``hostNetwork``): the
  client's model also takes its Python name (``host_network``), which the
  schema and the API server do not know;
* a date-time (the metadata of an ephemeral volume's claim template) is an
  RFC 3339 string only, as the API server parses ``metav1.Time``: the
  client's model alone would also take a number (a Unix time) or a date
  without a time or offset, none of which the schema allows;
* the fields the scheduler owns are refused: ``nodeName`` (the scheduler
  binds), ``schedulerName`` (the cluster's setting), and
  ``restartPolicy: Always`` (a batch job must end);
* placement fields the scheduler does not honour are refused with their
  path (:func:`refused_placement_fields`): a pod placed without looking at
  them would break them, or be refused by its kubelet. The ones it honours
  (requests, ``nodeSelector``, ``affinity`` (node affinity, pod affinity and
  anti-affinity), ``topologySpreadConstraints``, ``tolerations``, host
  ports, ``os``, ``overhead`` with ``runtimeClassName``) are read by
  :mod:`flotilla.service.jobspec`.

The podSpec is stored as :func:`stored_pod_spec` writes it (the API's own
field names) and reaches the pod unchanged but for those owned fields
(:func:`flotilla.kubernetes.pods.pod_manifest`).
"""

from __future__ import annotations

import copy
import re
from datetime import datetime
from functools import cache
from typing import Annotated, Any, Optional, get_args

from kubernetes.client.models import (V1Container, V1EphemeralVolumeSource, V1ManagedFieldsEntry, V1ObjectMeta,
                                      V1PersistentVolumeClaimTemplate, V1PodSpec, V1Volume)
from pydantic import BaseModel, BeforeValidator, Field, Strict, field_validator, model_validator

from flotilla.core.hostports import describe, host_port

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
    for group in ("containers", "initContainers"):
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
    if isinstance(out.get("resources"), dict):
        out["resources"] = {key: ({k: _quantity_text(v) for k, v in value.items()} if isinstance(value, dict)
                                  else value) for key, value in out["resources"].items()}
    return out


@cache
def _spellings(model: type[BaseModel]) -> tuple[dict[str, str], dict[str, type[BaseModel]]]:
    """``model``'s Python-only field names (name -> API name) and its fields that hold models (API name -> model)."""
    python_names, nested = {}, {}
    for name, field in model.model_fields.items():
        api_name = field.serialization_alias or field.alias or name
        if api_name != name:
            python_names[name] = api_name
        todo = [field.annotation]
        while todo:
            kind = todo.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                nested[api_name] = kind
            todo.extend(get_args(kind))
    return python_names, nested


def python_spellings(data: Any, model: type[BaseModel], path: str = "") -> list[str]:
    """``path: API name`` for every key of ``data`` (in any nesting) that is a field's Python name, not its API
    name. Walks only what was given, by the model's structure: work that grows with the pod spec's size."""
    out = []
    if isinstance(data, list):
        for k, item in enumerate(data):
            out += python_spellings(item, model, f"{path}[{k}]")
        return out
    if not isinstance(data, dict):
        return out
    python_names, nested = _spellings(model)
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key in python_names:
            out.append(f"{where}: unknown field, Kubernetes spells it {python_names[key]}")
        elif key in nested:
            out += python_spellings(value, nested[key], where)
    return out


#: RFC 3339 as Go's ``time.RFC3339`` parses it (what ``metav1.Time`` takes): a date, ``T``, a time with optional
#: fractional seconds, and ``Z`` or an offset. The calendar ranges are checked by the datetime parse after it.
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})")


def _rfc3339_text(value: Any) -> Any:
    if value is None or (isinstance(value, str) and _RFC3339.fullmatch(value)):
        return value
    raise ValueError(f"expected an RFC 3339 date-time string such as 2024-05-01T12:00:00Z, got {value!r}")


#: A date-time field of the Kubernetes schema: an RFC 3339 string (or null), nothing else.
Rfc3339 = Annotated[datetime, BeforeValidator(_rfc3339_text)]


def _field(model, name: str):
    """The client model's field ``name`` (its aliases and description) for a subclass that narrows its type."""
    return copy.copy(model.model_fields[name])


# The chain from the pod spec down to the date-time fields: each link narrows one field to the strict type below
# it and keeps the client's class name and description, so the OpenAPI document names the same components.
class V1ManagedFieldsEntry(V1ManagedFieldsEntry):   # noqa: F811
    __doc__ = V1ManagedFieldsEntry.__doc__   # the OpenAPI description
    time: Optional[Rfc3339] = _field(V1ManagedFieldsEntry, "time")


class V1ObjectMeta(V1ObjectMeta):   # noqa: F811
    __doc__ = V1ObjectMeta.__doc__   # the OpenAPI description
    creation_timestamp: Optional[Rfc3339] = _field(V1ObjectMeta, "creation_timestamp")
    deletion_timestamp: Optional[Rfc3339] = _field(V1ObjectMeta, "deletion_timestamp")
    managed_fields: Optional[list[V1ManagedFieldsEntry]] = _field(V1ObjectMeta, "managed_fields")


class V1PersistentVolumeClaimTemplate(V1PersistentVolumeClaimTemplate):   # noqa: F811
    __doc__ = V1PersistentVolumeClaimTemplate.__doc__   # the OpenAPI description
    metadata: Optional[V1ObjectMeta] = _field(V1PersistentVolumeClaimTemplate, "metadata")


class V1EphemeralVolumeSource(V1EphemeralVolumeSource):   # noqa: F811
    __doc__ = V1EphemeralVolumeSource.__doc__   # the OpenAPI description
    volume_claim_template: Optional[V1PersistentVolumeClaimTemplate] = _field(V1EphemeralVolumeSource,
                                                                              "volume_claim_template")


class V1Volume(V1Volume):   # noqa: F811
    __doc__ = V1Volume.__doc__   # the OpenAPI description
    ephemeral: Optional[V1EphemeralVolumeSource] = _field(V1Volume, "ephemeral")


class PodSpec(V1PodSpec):
    """A Kubernetes pod spec as a job may give it (see the module docstring)."""

    containers: list[V1Container] = Field(min_length=1)
    volumes: Optional[list[V1Volume]] = _field(V1PodSpec, "volumes")
    #: JSON numbers (a string or a boolean is refused, as the API server refuses them).
    termination_grace_period_seconds: Annotated[float, Strict()] | None = Field(None,
                                                                           alias="terminationGracePeriodSeconds")
    active_deadline_seconds: Annotated[float, Strict()] | None = Field(None, alias="activeDeadlineSeconds")

    @model_validator(mode="before")
    @classmethod
    def _api_names_and_quantities(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        wrong = python_spellings(data, cls)
        if wrong:
            raise ValueError("; ".join(wrong))
        return _quantities_as_text(data)

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


#: Placement fields Flotilla's scheduling does not honour, refused with why (field path -> message).
_REFUSED = (
    ("schedulingGates", lambda s: bool(s.scheduling_gates),
     "scheduling gates are not honoured: Flotilla binds the pod when it places the job, so there is nothing to gate"),
    ("schedulingGroup", lambda s: s.scheduling_group is not None,
     "schedulingGroup is kube-scheduler's workload grouping: use a gang (armadaproject.io/gangId) instead"),
    ("resourceClaims", lambda s: bool(s.resource_claims),
     "resource claims (dynamic resource allocation) are not honoured by Flotilla's placement: request resources "
     "in containers' resources instead"),
    ("priority", lambda s: s.priority is not None,
     "priority is set by the API server from priorityClassName: leave it out"),
    ("preemptionPolicy", lambda s: s.preemption_policy is not None,
     "preemptionPolicy is set by the API server from the priority class, and Flotilla's preemption follows "
     "priority classes: leave it out"),
    ("overhead", lambda s: s.overhead is not None and s.runtime_class_name is None,
     "overhead without runtimeClassName: the API server refuses a pod whose overhead no RuntimeClass defines"),
    ("runtimeClassName", lambda s: s.runtime_class_name is not None and not s.overhead,
     "a RuntimeClass adds its overhead to the pod, which the placement must count: give the RuntimeClass's "
     "overhead in overhead too (the API server refuses one that differs)"),
)


def refused_placement_fields(spec: PodSpec) -> list[tuple[str, str]]:
    """``(field path, why)`` for every placement field of ``spec`` Flotilla would not honour.

    A pod placed without looking at such a field would break the rule it
    states (or be refused by its kubelet), so the job is refused at
    submission instead. The containers' ``resources.claims`` and duplicate
    host ports within the pod are refused here too.
    """
    out = [(path, message) for path, given, message in _REFUSED if given(spec)]
    for group, containers in (("containers", spec.containers), ("initContainers", spec.init_containers)):
        for c, container in enumerate(containers or ()):
            if container.resources is not None and container.resources.claims:
                out.append((f"{group}[{c}].resources.claims",
                            "resource claims (dynamic resource allocation) are not honoured by Flotilla's placement"))
    seen: dict[tuple[str, int, str], str] = {}
    for path, key in _host_port_entries(spec):
        if key in seen:
            out.append((path, f"hostPort {describe((key,))} is also used by {seen[key]}: a pod cannot bind one "
                              f"host port twice"))
        else:
            seen[key] = path
    return out


def _host_port_entries(spec: PodSpec):
    """``(field path, (protocol, port, host IP))`` of each host port the pod binds.

    A container port with ``hostPort`` binds it; with ``hostNetwork`` every
    container port is a host port (the API server defaults ``hostPort`` to
    it). Sidecars (restartable init containers) run beside the containers,
    so their ports count too; ordinary init containers' ports are not
    held once they end and are left out, as kube-scheduler does.
    """
    groups = [("containers", c, container) for c, container in enumerate(spec.containers or ())]
    groups += [("initContainers", c, container) for c, container in enumerate(spec.init_containers or ())
               if container.restart_policy == "Always"]
    for group, c, container in groups:
        for p, port in enumerate(container.ports or ()):
            number = port.host_port or (port.container_port if spec.host_network else None)
            if number:
                yield f"{group}[{c}].ports[{p}].hostPort", host_port(port.protocol, number, port.host_ip)


def host_ports(spec: PodSpec) -> list[list]:
    """The pod's host ports as ``[protocol, port, host IP]``, sorted, each once (what the scheduler keeps apart,
    :mod:`flotilla.core.hostports`)."""
    return [list(key) for key in sorted({key for _, key in _host_port_entries(spec)})]


#: The node label a pod's ``os.name`` must match: the kubelet refuses a pod for another operating system.
OS_LABEL = "kubernetes.io/os"


def stored_pod_spec(spec: PodSpec) -> dict:
    """The podSpec as stored and sent: the API's field names, only the fields the user gave."""
    return spec.model_dump(by_alias=True, exclude_unset=True, mode="json")


__all__ = ["OS_LABEL", "PodSpec", "RESTART_POLICIES", "host_ports", "refused_placement_fields", "stored_pod_spec"]
