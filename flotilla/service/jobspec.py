"""Job files (Armada's jobspec, spec section 2) and their validation at submission.

Two stages, both all or nothing for the whole file:

1. shape: the pydantic models below (wrong types, missing fields); errors
   carry the field path, e.g. ``jobs[2].podSpec.containers``;
2. rules (:func:`validate_jobs`): priority class exists, requests equal
   limits, resource names are Kubernetes qualified names and quantities
   follow Kubernetes' grammar (:mod:`flotilla.core.quantities`), grace
   period and deadline rules, gangs complete and consistent, one of
   ``podSpec``/``podSpecs``.

The store adds the rules that need the database (the queue exists, a
clientId already seen returns the existing job, gang ids are not reused)
and the API checks that the user may submit to the queue. Every rejection
names the job by index and clientId, the field, and the rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Sequence

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from flotilla.config.models import RetryPolicy
from flotilla.core.gangannotations import read_gang_annotations
from flotilla.core.model import (GANG_CARDINALITY_ANNOTATION, GANG_ID_ANNOTATION, GANG_NODE_UNIFORMITY_LABEL_ANNOTATION,
                                 NAMESPACE_ANNOTATION)
from flotilla.core.nodeaffinity import AffinityError, parse_node_affinity
from flotilla.core.podrules import parse_pod_rules
from flotilla.core.quantities import (MAX_DURATION, QuantityError, format_quantity, parse_quantity,
                                     resource_name_problem)
from flotilla.kubernetes.public import (OS_LABEL, POD_LEVEL_RESOURCES, IngressSpec, PodSpec, ServiceSpec,
                                       effective_requests, exposed_ports, host_ports, is_pod_level_resource,
                                       pod_rules_spec, refused_placement_fields, spec_claims, stored_pod_spec)
from flotilla.service.bounds import BoundsError, StrictInt, check_value, job_file_problems, job_values, shown_text
from flotilla.service.settings import ServiceSettings, rule_dicts
from flotilla.service.store import NewJob, Pod, Rejection, SubmissionRejected

SIMULATED_DURATION_ANNOTATION = "flotilla.io/simulated-duration"
#: On a simulated cluster of ``serve``, the job's run ends in failure with this exit code (1-255) instead of success.
SIMULATED_EXIT_CODE_ANNOTATION = "flotilla.io/simulated-exit-code"
_EXIT_CODE = re.compile(r"[0-9]{1,3}", re.ASCII)


def _stringify(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _string_map(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stringify(v) for k, v in value.items()}
    return value


Str = Annotated[str, BeforeValidator(_stringify)]
StrMap = Annotated[dict[str, str], BeforeValidator(_string_map)]


#: A Kubernetes namespace name (a DNS-1123 label).
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _one_pod_spec_form(schema: dict) -> None:
    """The schema states :func:`validate_jobs`' rule: exactly one of podSpec and podSpecs (a non-empty list).

    The model itself takes null and both, so that the rule's refusal names the job and says what to give.
    """
    props = schema["properties"]
    for name in ("podSpec", "podSpecs"):
        field = props[name]
        field.update(next(s for s in field.pop("anyOf") if s.get("type") != "null"))
        field.pop("default", None)
    props["podSpecs"]["minItems"] = 1
    schema["oneOf"] = [{"required": ["podSpec"]}, {"required": ["podSpecs"]}]


class JobItem(BaseModel):
    """One job of a file; an unknown field is an error that names it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_pod_spec_form)
    #: A JSON integer (not "7", true or 7.0), as the schema says.
    priority: StrictInt = 0
    #: Where its pods go; none: the cluster's ``namespace`` setting.
    namespace: str | None = Field(None, max_length=63, pattern=NAMESPACE_PATTERN)
    clientId: Str | None = None
    labels: StrMap = Field(default_factory=dict)
    annotations: StrMap = Field(default_factory=dict)
    podSpec: PodSpec | None = None
    podSpecs: list[PodSpec] | None = None
    #: Exposing the first pod: created with it, in its namespace, gone with it (flotilla/kubernetes/services.py).
    services: list[ServiceSpec] = Field(default_factory=list)
    ingress: list[IngressSpec] = Field(default_factory=list)
    #: The job's own retry rules, tried before its queue's (docs/policies.md, "Retry policies").
    retryPolicy: RetryPolicy | None = None


class JobFile(BaseModel):
    """A job file: ``queue``, ``jobSetId`` and ``jobs`` (or one job's fields at the top level)."""

    model_config = ConfigDict(extra="forbid")
    queue: str = Field(min_length=1, max_length=255)
    jobSetId: str = Field(min_length=1, max_length=255)
    jobs: list[JobItem] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _single_job_form(cls, data: Any) -> Any:
        # Armada's short form: one job's fields next to queue and jobSetId.
        if isinstance(data, dict) and "jobs" not in data and ("podSpec" in data or "podSpecs" in data):
            data = dict(data)
            job = {k: data.pop(k) for k in list(data) if k not in ("queue", "jobSetId")}
            data["jobs"] = [job]
        return data


_JOB_ITEMS = TypeAdapter(list[JobItem])
#: Jobs validated in one call: a short hold of the interpreter lock (a few milliseconds; 100 jobs held it
#: 30 ms), so a thread validating a large file leaves the event loop its turn between steps.
VALIDATION_STEP = 20
#: Values (see :func:`bounds.job_values`) validated in one call, unless one job alone holds more.
VALIDATION_STEP_VALUES = 2000


def _steps(counts: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each step: at most :data:`VALIDATION_STEP` jobs and :data:`VALIDATION_STEP_VALUES` values."""
    out, start, held = [], 0, 0
    for index, count in enumerate(counts):
        if index > start and (index - start == VALIDATION_STEP or held + count > VALIDATION_STEP_VALUES):
            out.append((start, index))
            start, held = index, 0
        held += count
    if start < len(counts):
        out.append((start, len(counts)))
    return out


def job_file_in_steps(raw: Any) -> JobFile:
    """``JobFile.model_validate(raw)``, a few jobs at a time; the same :class:`ValidationError` when invalid.

    :class:`BoundsError` (413) for a job or the rest of the file over :func:`bounds.job_values`' bounds.
    """
    counts = job_values(raw)
    jobs = raw.get("jobs") if isinstance(raw, dict) else None
    if not isinstance(jobs, list) or (len(jobs) <= VALIDATION_STEP and sum(counts) <= VALIDATION_STEP_VALUES):
        return JobFile.model_validate(raw)
    items: list = []
    for start, end in _steps(counts):
        step = jobs[start:end]
        try:
            items += _JOB_ITEMS.validate_python(step)
        except ValidationError:   # job by job: an invalid job stays as given, for the last validation to word
            for one in step:
                try:
                    items.append(JobItem.model_validate(one))
                except ValidationError:
                    items.append(one)
    # Validated jobs pass as they are; the invalid ones (only they) are validated again, so every problem is
    # worded and ordered as one validation of the whole file words them.
    return JobFile.model_validate({**raw, "jobs": items})


# -- turning pydantic errors into rejections ---------------------------------------------------

def field_path(loc: Sequence) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def raw_client_id(raw: Any, index: int) -> str | None:
    try:
        value = raw["jobs"][index].get("clientId")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return None if value is None else str(value)


def rejections_from_errors(errors: Sequence[dict], raw: Any) -> list[Rejection]:
    """Pydantic errors (``loc`` relative to the file) as rejections naming the job."""
    out = []
    for err in errors:
        loc = [part for part in err.get("loc", ()) if part != "body"]
        if len(loc) >= 2 and loc[0] == "jobs" and isinstance(loc[1], int):
            index = loc[1]
            out.append(Rejection(index, raw_client_id(raw, index), field_path(loc[2:]) or "job", err["msg"]))
        else:
            out.append(Rejection(None, None, field_path(loc) or "file", err["msg"]))
    return out


def parse_file(raw: Any) -> JobFile:
    """The shape stage; raises :class:`SubmissionRejected` naming each job and field."""
    if not isinstance(raw, dict):
        raise SubmissionRejected([Rejection(None, None, "file", "expected a mapping with queue, jobSetId and jobs")])
    try:
        check_value(raw)   # what a JSON body meets in the API (bounds.load_json), for files read otherwise
    except BoundsError as exc:
        raise SubmissionRejected([Rejection(None, None, exc.field or "file", exc.message)]) from None
    try:
        return JobFile.model_validate(raw)
    except ValidationError as exc:
        fixed = raw if "jobs" in raw else JobFile._single_job_form(raw)
        raise SubmissionRejected(rejections_from_errors(exc.errors(include_url=False), fixed)) from None


# -- the rules ----------------------------------------------------------------------------------

def _is_gpu(resource: str) -> bool:
    return resource.endswith("/gpu") or resource == "gpu"


def _fmt_seconds(value: float) -> str:
    return f"{value:g}s"


def validate_jobs(file: JobFile, settings: ServiceSettings) -> list[NewJob]:
    """The rule stage: every job of the file checked, all problems reported together.

    One validator per part of a job (:func:`validate_job`), then the gangs across the file
    (:func:`check_gangs`); problems are reported by job index, each job's in the order its parts are checked.
    """
    problems: list[Rejection] = job_file_problems(file)
    out: list[NewJob] = []
    for index, job in enumerate(file.jobs):
        new = validate_job(index, job, settings, problems)
        if new is not None:
            out.append(new)
    check_gangs(out, problems)
    if problems:
        problems.sort(key=lambda r: (r.index if r.index is not None else -1))
        raise SubmissionRejected(problems)
    return out


#: ``reject(field, message)``: one problem of the job being checked, its field relative to the job.
Reject = Callable[[str, str], None]


@dataclass(slots=True)
class _PodParts:
    """What one pod spec of a job gives: the pod to place, its stored spec, its grace period and deadline."""

    pod: Pod
    stored: dict
    grace: float
    deadline: float | None


def validate_job(index: int, job: JobItem, settings: ServiceSettings, problems: list[Rejection]) -> NewJob | None:
    """One job, its parts checked in order (each validator appends its problems); None when any part failed."""
    cid = job.clientId
    before = len(problems)

    def reject(field: str, message: str) -> None:
        problems.append(Rejection(index, cid, field, message))

    specs = pod_spec_form(job, reject)
    if specs is None:
        return None
    priority_class = priority_class_of(specs, settings, reject)
    parts = [pod_parts(path, spec, job, settings, reject) for path, spec in specs]
    pods = [part.pod for part in parts]
    stored_specs = [part.stored for part in parts]
    check_exposed_ports(job, stored_specs, reject)
    grace = max([0.0, *(part.grace for part in parts)])
    deadline = job_deadline(pods, [part.deadline for part in parts], stored_specs, grace, settings)
    gang_id, cardinality = check_gang_annotations(job, len(pods), reject)
    check_simulation_annotations(job, reject)
    if len(problems) > before:
        return None
    rules = list(rule_dicts(job.retryPolicy))
    return NewJob(index=index, client_id=cid, priority=job.priority, priority_class=priority_class,
                  pods=pods, grace_period=grace, deadline=float(deadline),
                  annotations={**job.annotations, **({NAMESPACE_ANNOTATION: job.namespace} if job.namespace else {})},
                  spec=stored_job_spec(job, stored_specs, rules),
                  gang_id=gang_id or None, gang_cardinality=cardinality, retry_policy=rules)


def pod_spec_form(job: JobItem, reject: Reject) -> list[tuple[str, PodSpec]] | None:
    """Exactly one of ``podSpec`` and ``podSpecs``: the pod specs with their paths, else None (refused)."""
    if job.podSpec is not None and job.podSpecs is not None:
        reject("podSpec", "give either podSpec or podSpecs, not both")
        return None
    if job.podSpec is None and not job.podSpecs:
        reject("podSpec", "a job needs a podSpec (or podSpecs: a list of pod specs)")
        return None
    return [("podSpec", job.podSpec)] if job.podSpec is not None else \
        [(f"podSpecs[{k}]", spec) for k, spec in enumerate(job.podSpecs)]


def priority_class_of(specs: list[tuple[str, PodSpec]], settings: ServiceSettings, reject: Reject) -> str:
    """The job's priority class: one the service knows, shared by all its pods (none given: the default)."""
    known_pcs = settings.priority_class_names
    pcs = {spec.priority_class_name for _, spec in specs if spec.priority_class_name}
    priority_class = settings.default_priority_class
    if len(pcs) > 1:
        reject(f"{specs[0][0]}.priorityClassName",
               f"the pods of one job must share a priority class, got {', '.join(sorted(pcs))}")
    elif pcs:
        priority_class = pcs.pop()
        if priority_class not in known_pcs:
            reject(f"{next(p for p, s in specs if s.priority_class_name)}.priorityClassName",
                   f"priority class {priority_class!r} does not exist (known: {', '.join(sorted(known_pcs))})")
    return priority_class


def pod_parts(path: str, spec: PodSpec, job: JobItem, settings: ServiceSettings, reject: Reject) -> _PodParts:
    """One pod spec (at ``path``): its requests, fields placement refuses, grace period, deadline, node selector,
    affinity and spread rules, claims."""
    requests = pod_requests(path, spec, reject)
    for field_name, message in refused_placement_fields(spec):
        reject(f"{path}.{field_name}", message)
    grace = grace_period(path, spec, settings, reject)
    deadline = active_deadline(path, spec, reject)
    tolerations = [t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations or ()]
    selector = node_selector(path, spec, reject)
    stored = stored_pod_spec(spec)
    node_affinity = check_affinity(path, stored, job, reject)
    claims = pod_claims(path, stored, job, settings, reject)
    pod = Pod({k: v for k, v in requests.items() if v}, selector, tolerations, host_ports(spec),
              node_affinity or None, dict(job.labels), pod_rules_spec(stored), claims)
    return _PodParts(pod, stored, grace, deadline)


def pod_requests(path: str, spec: PodSpec, reject: Reject) -> dict[str, int]:
    """The pod's effective requests (kube-scheduler's rule: containers, init containers, overhead, pod level),
    every container's requests equal to its limits."""
    containers: list[dict[str, int]] = []
    init: list[tuple[dict[str, int], bool]] = []
    for group, items in (("containers", spec.containers), ("initContainers", spec.init_containers)):
        for c, container in enumerate(items or ()):
            effective = _equal_requests(container.resources, f"{path}.{group}[{c}].resources", reject)
            if group == "containers":
                containers.append(effective)
            else:
                init.append((effective, container.restart_policy == "Always"))
    pod_level = None
    if spec.resources is not None:
        pod_level = _equal_requests(spec.resources, f"{path}.resources", reject)
        for name in pod_level:
            if not is_pod_level_resource(name):
                reject(f"{path}.resources.requests.{name}",
                       f"a pod-level request may name only {', '.join(POD_LEVEL_RESOURCES)} or "
                       f"hugepages-*, got {name!r}")
    overhead = _parse_map(spec.overhead or {}, f"{path}.overhead", reject) or {}
    return effective_requests(containers, init, overhead, pod_level)


def grace_period(path: str, spec: PodSpec, settings: ServiceSettings, reject: Reject) -> float:
    """``terminationGracePeriodSeconds``: 0 means 1 s, none the service's default; not negative, not between 0 and
    1 s, not above ``gracePeriod.max``."""
    tgps = spec.termination_grace_period_seconds
    if tgps is None:
        return max(1.0, settings.grace_default)
    if tgps < 0:
        reject(f"{path}.terminationGracePeriodSeconds", f"must not be negative, got {tgps:g}")
        return 1.0
    if tgps == 0:
        return 1.0
    if tgps < 1:
        reject(f"{path}.terminationGracePeriodSeconds",
               f"{tgps:g}s is between 0 and 1s: use 0 (meaning 1s) or at least 1s")
        return 1.0
    if tgps > settings.grace_max:
        reject(f"{path}.terminationGracePeriodSeconds",
               f"{tgps:g}s is above the maximum grace period (gracePeriod.max = "
               f"{_fmt_seconds(settings.grace_max)})")
        return tgps
    return float(tgps)


def active_deadline(path: str, spec: PodSpec, reject: Reject) -> float | None:
    """``activeDeadlineSeconds`` as given (None: the service's default applies), positive."""
    ads = spec.active_deadline_seconds
    if ads is not None and ads <= 0:
        reject(f"{path}.activeDeadlineSeconds", f"must be positive, got {ads:g}")
    return ads


def node_selector(path: str, spec: PodSpec, reject: Reject) -> dict[str, str]:
    """``nodeSelector``, with ``os.name`` as a selector on the OS label (the kubelet refuses a pod for another
    operating system); the two must agree."""
    selector = dict(spec.node_selector or {})
    if spec.os is not None:
        if selector.get(OS_LABEL, spec.os.name) != spec.os.name:
            reject(f"{path}.os.name", f"os {spec.os.name!r} contradicts nodeSelector {OS_LABEL}="
                                      f"{selector[OS_LABEL]}")
        selector[OS_LABEL] = spec.os.name
    return selector


def check_affinity(path: str, stored: dict, job: JobItem, reject: Reject) -> dict | None:
    """Node affinity, pod (anti-)affinity and spread constraints as placement reads them; the node affinity."""
    node_affinity = (stored.get("affinity") or {}).get("nodeAffinity")
    try:
        parse_node_affinity(node_affinity)
    except AffinityError as exc:
        reject(f"{path}.affinity.nodeAffinity" + (f".{exc.path}" if exc.path else ""), exc.message)
    try:
        parse_pod_rules(stored.get("affinity"), stored.get("topologySpreadConstraints"),
                        job.namespace or "default", job.labels)
    except AffinityError as exc:
        reject(f"{path}.{exc.path}", exc.message)
    return node_affinity


def pod_claims(path: str, stored: dict, job: JobItem, settings: ServiceSettings, reject: Reject) -> list[str]:
    """The PersistentVolumeClaims the pod mounts; refused when every cluster is simulated (none has volumes)."""
    claims = list(spec_claims(stored, job.namespace))
    if claims and settings.clusters and all(c.kind != "kubernetes" for c in settings.clusters):
        for v, volume in enumerate(stored.get("volumes") or ()):
            if (volume.get("persistentVolumeClaim") or {}).get("claimName"):
                reject(f"{path}.volumes[{v}].persistentVolumeClaim",
                       "the service's clusters are all simulated, and simulated clusters have no volumes: "
                       "a job naming a claim could never run")
    return claims


def check_exposed_ports(job: JobItem, stored_specs: list[dict], reject: Reject) -> None:
    """A service's or ingress's ports are containerPorts of the job's first pod."""
    exposed = exposed_ports(stored_specs[0]) if stored_specs else set()
    for field, entries in (("services", job.services), ("ingress", job.ingress)):
        for e, entry in enumerate(entries):
            for p, port in enumerate(entry.ports):
                if port not in exposed:
                    reject(f"{field}[{e}].ports[{p}]",
                           f"port {port} is not a containerPort of the job's first pod (exposed: "
                           f"{', '.join(map(str, sorted(exposed))) or 'none'})")


def job_deadline(pods: list[Pod], deadlines: list[float | None], stored_specs: list[dict], grace: float,
                 settings: ServiceSettings) -> float:
    """The job's active deadline (its pods' longest; a pod without one: the service's default for GPU or CPU
    jobs). Each stored pod spec gets the job's grace period and its own deadline."""
    gpu = any(_is_gpu(name) and amount > 0 for pod in pods for name, amount in pod.requests.items())
    default_deadline = settings.deadline_gpu if gpu else settings.deadline_cpu
    deadline = max((d if d is not None else default_deadline) for d in deadlines) if deadlines else default_deadline
    for stored, given in zip(stored_specs, deadlines):
        stored["terminationGracePeriodSeconds"] = grace
        stored["activeDeadlineSeconds"] = given if given is not None else default_deadline
    return deadline


def check_gang_annotations(job: JobItem, npods: int, reject: Reject) -> tuple[str | None, int | None]:
    """``(gang id as given, cardinality)``: the gang annotations as every reader of jobs reads them
    (:func:`flotilla.core.gangannotations.read_gang_annotations`), a job of several pods grouped as a gang is."""
    gang = read_gang_annotations(job.annotations, size=npods if npods >= 2 else 0,
                                 grouped_by="a gang or a job of several pods")
    for key, why in gang.problems:
        reject(f"annotations.{key}", why)
    return job.annotations.get(GANG_ID_ANNOTATION), gang.cardinality


def check_simulation_annotations(job: JobItem, reject: Reject) -> None:
    """A simulated run's duration and exit code, when given, parse."""
    duration_text = job.annotations.get(SIMULATED_DURATION_ANNOTATION)
    if duration_text is not None and duration_of_annotations(job.annotations) is None:
        reject(f"annotations.{SIMULATED_DURATION_ANNOTATION}",
               f"expected a duration such as 30s, 5m, 2h, 3d or seconds (ASCII digits, at most "
               f"{int(MAX_DURATION)} seconds), got {shown_text(duration_text[:80])!r}")
    exit_text = job.annotations.get(SIMULATED_EXIT_CODE_ANNOTATION)
    if exit_text is not None and exit_code_of_annotations(job.annotations) is None:
        reject(f"annotations.{SIMULATED_EXIT_CODE_ANNOTATION}",
               f"expected an exit code 1-255 in ASCII digits (a run that succeeds has none), got "
               f"{shown_text(exit_text[:80])!r}")


def stored_job_spec(job: JobItem, stored_specs: list[dict], rules: list[dict]) -> dict:
    """The job as stored: its fields as given, its pod specs as placement and the clusters read them."""
    spec_out = job.model_dump(mode="json", exclude_none=True)
    spec_out.pop("podSpec", None)
    spec_out.pop("podSpecs", None)
    spec_out["podSpec" if job.podSpec is not None else "podSpecs"] = \
        stored_specs[0] if job.podSpec is not None else stored_specs
    if rules:
        spec_out["retryPolicy"] = rules
    return spec_out


def check_gangs(out: list[NewJob], problems: list[Rejection]) -> None:
    """Gangs across the file: every member in this submission, one cardinality, one uniformity label; each
    member learns the gang's pod count."""
    gangs: dict[str, list[NewJob]] = {}
    for new in out:
        if new.gang_id is not None:
            gangs.setdefault(new.gang_id, []).append(new)
    for gang_id, members in gangs.items():
        cards = sorted({m.gang_cardinality for m in members})
        if len(cards) > 1:
            detail = ", ".join(f"job {m.index} says {m.gang_cardinality}" for m in members)
            for m in members:
                problems.append(Rejection(m.index, m.client_id, f"annotations.{GANG_CARDINALITY_ANNOTATION}",
                                          f"gang {gang_id!r} has inconsistent cardinality ({detail})"))
            continue
        labels = sorted({m.annotations.get(GANG_NODE_UNIFORMITY_LABEL_ANNOTATION, "") for m in members})
        if len(labels) > 1:
            detail = ", ".join(f"job {m.index} says {m.annotations.get(GANG_NODE_UNIFORMITY_LABEL_ANNOTATION) or 'none'}"
                               for m in members)
            for m in members:
                problems.append(Rejection(m.index, m.client_id, f"annotations.{GANG_NODE_UNIFORMITY_LABEL_ANNOTATION}",
                                          f"gang {gang_id!r} members disagree on the uniformity label ({detail})"))
            continue
        if len(members) != cards[0]:
            for m in members:
                problems.append(Rejection(
                    m.index, m.client_id, f"annotations.{GANG_ID_ANNOTATION}",
                    f"gang {gang_id!r} has {len(members)} of its {cards[0]} members in this submission; "
                    f"a gang is accepted only when all of its members are submitted together"))
            continue
        total_pods = sum(len(m.pods) for m in members)
        for m in members:
            m.gang_pods = total_pods


def _equal_requests(resources, path: str, reject) -> dict[str, int]:
    """A container's (or the pod's) requests, which must equal its limits (a limit alone is the request)."""
    req = _parse_map((resources and resources.requests) or {}, f"{path}.requests", reject)
    lim = _parse_map((resources and resources.limits) or {}, f"{path}.limits", reject)
    if req is None or lim is None:
        return {}
    for name in sorted(set(req) | set(lim)):
        if name in req and name not in lim:
            reject(f"{path}.limits.{name}",
                   f"requests must equal limits: {name} is requested ({format_quantity(req[name], name)}) "
                   f"but has no limit")
        elif name in req and req[name] != lim[name]:
            reject(f"{path}.limits.{name}",
                   f"requests must equal limits: {name} requests {format_quantity(req[name], name)}"
                   f" but limits {format_quantity(lim[name], name)}")
    return {**lim, **req}


def _parse_map(values: dict, path: str, reject) -> dict[str, int] | None:
    out: dict[str, int] = {}
    ok = True
    for name, value in values.items():
        if (why := resource_name_problem(name)) is not None:
            reject(f"{path}.{shown_text(name)}", why)
            ok = False
            continue
        if name == "pods":   # as the API server refuses it: not a resource a container requests
            reject(f"{path}.pods", "must be a standard resource for containers: a pod takes one pod slot of its "
                                   "node, it does not request pods")
            ok = False
            continue
        try:
            out[name] = parse_quantity(value, name)
        except QuantityError as exc:
            reject(f"{path}.{name}", f"quantity does not parse: {exc}")
            ok = False
    return out if ok else None


def prepare(raw: Any, settings: ServiceSettings) -> tuple[JobFile, list[NewJob]]:
    """Shape and rules: the validated file and its jobs ready for :meth:`Store.submit`."""
    file = parse_file(raw)
    return file, validate_jobs(file, settings)


def duration_of_annotations(annotations: dict) -> float | None:
    """The run time in ``flotilla.io/simulated-duration`` (:func:`parse_duration`'s grammar: ASCII digits, a
    unit, bounded), else None (submission refuses a text that does not parse)."""
    from flotilla.core.quantities import parse_duration

    text = annotations.get(SIMULATED_DURATION_ANNOTATION)
    if text is None:
        return None
    try:
        return parse_duration(text)
    except (QuantityError, ValueError):
        return None


def exit_code_of_annotations(annotations: dict) -> int | None:
    """The exit code in ``flotilla.io/simulated-exit-code`` (1-255), else None (the run succeeds)."""
    text = annotations.get(SIMULATED_EXIT_CODE_ANNOTATION)
    if text is None or not _EXIT_CODE.fullmatch(text):   # "²" and "٣" are digits to str.isdigit, not to int()
        return None
    code = int(text)
    return code if 1 <= code <= 255 else None


__all__ = ["JobFile", "JobItem", "PodSpec", "prepare", "parse_file", "validate_jobs", "rejections_from_errors",
           "SIMULATED_DURATION_ANNOTATION", "SIMULATED_EXIT_CODE_ANNOTATION", "exit_code_of_annotations"]
