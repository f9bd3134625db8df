"""The writes to the API server: pods created (bound by ``spec.nodeName`` or the ``binding`` subresource), in-cluster
pods bound, pods deleted, and a job's services and ingresses (pool threads; no lock held).

Written rules, one per refusal, each said as what the job becomes
(:class:`WriteRefused`: ``kind`` ``lost`` is retried, ``failed`` fails the
job):

* a pod name taken (409 AlreadyExists) is an earlier attempt's pod still
  terminating: the next attempt's name is tried, three in all;
* 403 is the platform's doing, not the job's: ``lost``, said naming the verb
  and the resource Flotilla may not use; an unreachable API server: ``lost``;
* a namespace that does not exist fails the job: Flotilla creates no
  namespaces (one that exists is remembered, not asked again);
* binding an in-cluster pod names its uid: a pod deleted, made again under
  its name, or bound meanwhile (404, 409) is never this job's place;
* a delete of something already gone (404) is done.

What a write means for the job's bookkeeping is the start and stop paths'
(:mod:`flotilla.kubernetes.backend.starts`, :mod:`flotilla.kubernetes.backend.stops`).
"""

from __future__ import annotations

from typing import Callable

import structlog

from flotilla.core.backend import PodTemplate
from flotilla.core.model import Job
from flotilla.kubernetes.client import ApiError, KubeError, Unreachable, forbidden_message, pod_path
from flotilla.kubernetes.intake import POD_NAME, POD_NAMESPACE, POD_UID
from flotilla.kubernetes.pods import JOB_ID, PodSettings, pod_manifest
from flotilla.kubernetes.services import exposure_manifests, object_path, owner_reference

log = structlog.get_logger("flotilla.kubernetes")

#: How many attempts' names a pod is tried under when the name is taken.
NAME_TRIES = 3


class NamespaceMissing(Exception):
    """The job's namespace does not exist in the cluster: the job fails (Flotilla creates no namespaces)."""


class WriteRefused(Exception):
    """A write refused or not made: ``kind`` (``lost``: retried; ``failed``: the job fails) and ``reason``."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind, self.reason = kind, reason


class PodWrites:
    """The writes of cluster ``cluster`` through ``client``; ``bind``: ``node-name`` (pods created bound) or
    ``binding`` (created pending, then bound through the subresource)."""

    #: What a refused write raises, for the parts handed the writes.
    Refused = WriteRefused

    def __init__(self, client, cluster: str, settings: PodSettings, bind: str) -> None:
        self.client = client
        self.cluster = cluster
        self.settings = settings
        self.bind = bind
        self._namespaces: set[str] = set()   # seen to exist

    def check_namespace(self, namespace: str) -> None:
        """Raise :class:`NamespaceMissing` unless ``namespace`` exists (remembered once seen)."""
        if namespace in self._namespaces:
            return
        try:
            self.client.get(f"/api/v1/namespaces/{namespace}")
        except ApiError as exc:
            if exc.status == 404:
                raise NamespaceMissing(f"namespace {namespace!r} does not exist on cluster {self.cluster}") from None
            raise
        self._namespaces.add(namespace)

    def create(self, job: Job, node: str, attempt: int, namespace: str, template: PodTemplate | None,
               duration: float | None, priority_class_known: bool, exposed: bool,
               taken: Callable[[int], None]) -> tuple[str, dict | None]:
        """Create ``job``'s pod on ``node`` (its name, and with ``exposed`` the pod as created: its services need its
        uid); ``taken(attempt)`` is told each next attempt tried because the name was taken. Raises
        :class:`WriteRefused`."""
        created = None
        for _ in range(NAME_TRIES):
            body = pod_manifest(job, None if self.bind == "binding" else node, attempt, self.settings, duration,
                                priority_class_known=priority_class_known, template=template)
            name = body["metadata"]["name"]
            try:
                self.check_namespace(namespace)
                if exposed:   # its services and ingresses need its uid
                    created = self.client.post(pod_path(namespace), body)
                else:
                    self.client.create_pod(namespace, body)
                if self.bind == "binding":
                    self.client.post(pod_path(namespace, name) + "/binding", parse=False, body={
                        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
                return name, created
            except ApiError as exc:
                if exc.status == 409 and exc.reason == "AlreadyExists":
                    # A pod of that name exists: ours from an earlier attempt still terminating -> next attempt.
                    attempt += 1
                    taken(attempt)
                    continue
                if exc.status == 403:   # the platform's doing: retried, and said once, naming verb and resource
                    raise WriteRefused("lost", forbidden_message(exc)) from None
                raise WriteRefused("failed", f"pod rejected: {exc}") from None
            except NamespaceMissing as exc:
                raise WriteRefused("failed", str(exc)) from None
            except Unreachable as exc:
                raise WriteRefused("lost", f"API server unreachable: {exc}") from None
        raise WriteRefused("failed", "pod name taken by earlier attempts")

    def bind_pod(self, job: Job, node: str) -> tuple[str, str]:
        """Bind the in-cluster pod of ``job`` to ``node`` (``pods/binding``), only the very pod that was queued (its
        uid); returns its ``(namespace, name)``. Raises :class:`WriteRefused`."""
        namespace, name, uid = job.annotations[POD_NAMESPACE], job.annotations[POD_NAME], job.annotations[POD_UID]
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": {JOB_ID: job.id}},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            self.client.post(pod_path(namespace, name) + "/binding", body, parse=False)
        except ApiError as exc:
            if exc.status == 403:
                raise WriteRefused("lost", forbidden_message(exc)) from None
            if exc.status in (404, 409):
                # Gone, made again under its name (another uid), or bound meanwhile: never this pod's place.
                raise WriteRefused("failed", f"pod {namespace}/{name} not bound: it was deleted, replaced or bound "
                                             f"since it was queued ({exc})") from None
            raise WriteRefused("failed", f"binding refused: {exc}") from None
        except Unreachable as exc:
            raise WriteRefused("lost", f"API server unreachable: {exc}") from None
        return namespace, name

    def expose(self, pod: dict, template: PodTemplate) -> tuple[list[str], WriteRefused | None]:
        """Create the job's services and ingresses, owned by its first pod ``pod``: the ones made
        (``resource/name``) and, when one was refused, why (the caller removes the pod and those made)."""
        namespace = pod["metadata"]["namespace"]
        done = []
        for resource, obj in exposure_manifests(pod, template.services, template.ingresses,
                                                self.settings.ingress_domain):
            obj["metadata"]["ownerReferences"] = [owner_reference(pod)]
            try:
                self.client.post(object_path(namespace, resource), obj, parse=False)
                done.append(f"{resource}/{obj['metadata']['name']}")
            except (ApiError, Unreachable) as exc:
                if isinstance(exc, ApiError) and exc.status == 409:
                    continue   # left by an earlier attempt: owned by the old pod, replaced below by the GC
                if isinstance(exc, Unreachable) or exc.status == 403:
                    why = forbidden_message(exc) if isinstance(exc, ApiError) else str(exc)
                    return done, WriteRefused("lost", f"{obj['kind']} {obj['metadata']['name']}: {why}")
                return done, WriteRefused("failed", f"{obj['kind']} {obj['metadata']['name']} rejected: {exc}")
        return done, None

    def delete_pod(self, key: tuple[str, str], grace: int | None) -> None:
        """Delete pod ``key`` with ``grace`` seconds (None: the pod's own ``terminationGracePeriodSeconds``); raises
        what the API server answers."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        self.client.delete(pod_path(*key), options)

    def delete_quietly(self, key: tuple[str, str], grace: int | None = 0) -> None:
        """Delete pod ``key`` with ``grace`` seconds (None: its own), whatever the answer."""
        try:
            self.delete_pod(key, grace)
        except KubeError:
            pass

    def delete_same(self, namespace: str, name: str, uid: str) -> None:
        """Delete pod ``namespace/name`` gracefully if it is still the pod ``uid``; gone or replaced is fine."""
        try:   # the uid as precondition: a pod made again under the name since is not this job's
            self.client.delete(pod_path(namespace, name), {"apiVersion": "v1", "kind": "DeleteOptions",
                                                           "preconditions": {"uid": uid}})
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("kubernetes.delete_failed", cluster=self.cluster, pod=f"{namespace}/{name}",
                            error=str(exc))
        except Unreachable as exc:
            log.warning("kubernetes.delete_unreachable", cluster=self.cluster, pod=f"{namespace}/{name}",
                        error=str(exc))

    def delete_object(self, namespace: str, item: str) -> None:
        """Delete ``resource/name`` (a job's service or ingress); gone already is fine."""
        resource, name = item.split("/", 1)
        try:
            self.client.delete(object_path(namespace, resource, name))
        except ApiError as exc:
            if exc.status != 404:
                log.warning("kubernetes.delete_failed", cluster=self.cluster, object=item, error=str(exc))
        except KubeError as exc:
            log.warning("kubernetes.delete_failed", cluster=self.cluster, object=item, error=str(exc))


__all__ = ["NamespaceMissing", "PodWrites", "WriteRefused"]
