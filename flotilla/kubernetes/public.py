"""What the rest of Flotilla (the service) may use of the Kubernetes package: its public surface.

The service reads and checks submitted podSpecs as the API server would
(requests, host ports, exposure, claims, placement fields), takes in the
pods others create (their labels and the ``Arrival`` of one), ranks the
clusters' PriorityClasses beside its own, and reads a job's pod log through
a cluster's API server. Those names are here, and only here:
``tests/core/test_core_imports.py`` refuses a ``flotilla.service`` module that
imports any other module of ``flotilla.kubernetes``, so the backend's
insides (informers, writes, held starts, conditions) can change without the
service noticing. Everything the backend offers the service at run time
comes through the capability protocols (:mod:`flotilla.core.capabilities`).
"""

from __future__ import annotations

from flotilla.kubernetes.client import ApiError as KubeApiError, KubeClient, Unreachable, forbidden_message
from flotilla.kubernetes.intake import (JOB_SET_LABEL, KUEUE_QUEUE_LABEL, POD_NAME, POD_NAMESPACE, POD_UID,
                                        QUEUE_LABEL, Arrival, pod_rules_spec, queue_label)
from flotilla.kubernetes.podspec import OS_LABEL, PodSpec, host_ports, refused_placement_fields, stored_pod_spec
from flotilla.kubernetes.pods import ATTEMPT, JOB_ID, label_value
from flotilla.kubernetes.priorityclasses import NO_CLASS, cluster_classes
from flotilla.kubernetes.requests import POD_LEVEL_RESOURCES, effective_requests, is_pod_level_resource
from flotilla.kubernetes.services import IngressSpec, ServiceSpec, exposed_ports
from flotilla.kubernetes.volumes import spec_claims

__all__ = [
    "ATTEMPT", "Arrival", "IngressSpec", "JOB_ID", "JOB_SET_LABEL", "KUEUE_QUEUE_LABEL", "KubeApiError", "KubeClient",
    "NO_CLASS", "OS_LABEL", "POD_LEVEL_RESOURCES", "POD_NAME", "POD_NAMESPACE", "POD_UID", "PodSpec", "QUEUE_LABEL",
    "ServiceSpec", "Unreachable", "cluster_classes", "effective_requests", "exposed_ports", "forbidden_message",
    "host_ports", "is_pod_level_resource", "label_value", "pod_rules_spec", "queue_label", "refused_placement_fields",
    "spec_claims", "stored_pod_spec",
]
