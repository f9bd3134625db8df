"""A ``kind: kubernetes`` entry of the scheduler config as a :class:`KubernetesCluster` and its pod settings.

Written rule: what the config leaves unset keeps the cluster's (and
:class:`~flotilla.kubernetes.pods.PodSettings`') own default; durations are
read as the config writes them (a number of seconds, ``30s``, ``5m``).
"""

from __future__ import annotations

from typing import Mapping

from flotilla.core.quantities import QuantityError, parse_duration
from flotilla.kubernetes.backend.cluster import KubernetesCluster
from flotilla.kubernetes.backend.volumewaits import volume_writers
from flotilla.kubernetes.client import KubeClient
from flotilla.kubernetes.pods import PodSettings


def backend_from_config(cluster_config, config=None, **kwargs) -> KubernetesCluster:
    """A :class:`KubernetesCluster` for a ``kind: kubernetes`` entry of the scheduler config."""
    settings = pod_settings(cluster_config, config)
    pcs = []
    if config is not None:
        pcs = [(pc.name, pc.priority, pc.preemptible) for pc in getattr(config, "priority_classes", []) or []]
    options = dict(
        kubeconfig=getattr(cluster_config, "kubeconfig", None) or "~/.kube/config",
        context=getattr(cluster_config, "context", None),
        settings=settings,
        priority_classes=pcs,
    )
    if getattr(cluster_config, "in_cluster", False):
        workers = getattr(cluster_config, "workers", None) or 32
        options["client"] = KubeClient.from_in_cluster(pool_size=max(8, workers + volume_writers(workers) + 6))
    for attr, key in (("bind", "bind"), ("workers", "workers"), ("node_selector", "node_selector"),
                      ("delete_finished", "delete_finished"), ("stuck_pod_expiry", "stuck_pod_expiry"),
                      ("node_lost_timeout", "node_lost_timeout"), ("volume_bind_timeout", "volume_bind_timeout"),
                      ("finished_pod_retention", "finished_pod_retention")):
        value = getattr(cluster_config, attr, None)
        if value is not None:
            options[key] = value
    spread = getattr(config, "pod_topology_spread", None)
    if spread is not None and spread.constraints():
        options["default_spread"] = spread.constraints()
    options.update(kwargs)
    return KubernetesCluster(cluster_config.name, **options)


def _seconds(value, default: float | None) -> float | None:
    if value is None:
        return default
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    try:
        return parse_duration(value)
    except QuantityError:
        return default


def pod_settings(cluster_config=None, config=None) -> PodSettings:
    """Pod settings from the scheduler config: namespace, grace period default, cpu/gpu deadlines."""
    grace = getattr(config, "grace_period", None) if config is not None else None
    deadlines = getattr(config, "deadlines", None) if config is not None else None

    def pick(obj, *names):
        for n in names:
            if obj is None:
                return None
            if isinstance(obj, Mapping):
                if n in obj:
                    return obj[n]
            elif getattr(obj, n, None) is not None:
                return getattr(obj, n)
        return None

    defaults = PodSettings()
    return PodSettings(
        namespace=getattr(cluster_config, "namespace", None) or defaults.namespace,
        name_prefix=getattr(cluster_config, "pod_name_prefix", None) or defaults.name_prefix,
        scheduler_name=getattr(cluster_config, "scheduler_name", None) or defaults.scheduler_name,
        grace_default=_seconds(pick(grace, "default"), defaults.grace_default),
        deadline_cpu=_seconds(pick(deadlines, "cpu"), defaults.deadline_cpu),
        deadline_gpu=_seconds(pick(deadlines, "gpu"), defaults.deadline_gpu),
        ingress_domain=getattr(cluster_config, "ingress_domain", None),
    )


__all__ = ["backend_from_config", "pod_settings"]
