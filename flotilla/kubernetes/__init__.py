"""Kubernetes clusters behind the cluster-backend protocol.

* :mod:`flotilla.kubernetes.backend`: :class:`KubernetesCluster`, one cluster
  (informers, pod writes, job events);
* :mod:`flotilla.kubernetes.pods`: jobs as pods and back (labels, annotations);
* :mod:`flotilla.kubernetes.client`: JSON over the official client's connection pool;
* :mod:`flotilla.kubernetes.runner`: a scheduler loop with jobs in memory.

``kind: kubernetes`` entries of a config become backends through the
``flotilla_cluster_backend`` hook (:class:`KubernetesBackendPlugin`), or
directly through :func:`make_backends`.
"""

from __future__ import annotations

from flotilla.core.hookspecs import hookimpl


class KubernetesBackendPlugin:
    """Answers ``flotilla_cluster_backend`` for ``kind: kubernetes`` clusters."""

    def __init__(self, args=None):
        self.args = dict(args or {})

    @hookimpl
    def flotilla_cluster_backend(self, cluster_config, config):
        if getattr(cluster_config, "kind", None) != "kubernetes":
            return None
        from flotilla.kubernetes.backend import backend_from_config
        return backend_from_config(cluster_config, config)


def make_backends(config, pm=None, kinds=("kubernetes",), **kwargs) -> dict:
    """One backend per cluster of ``config`` whose kind is in ``kinds``, by name.

    A plugin manager's ``flotilla_cluster_backend`` hook is asked first (so a
    package can replace the built-in backends); ``kind: kubernetes`` falls back
    to :class:`~flotilla.kubernetes.backend.KubernetesCluster`.
    """
    from flotilla.kubernetes.backend import backend_from_config

    backends = {}
    for cluster in getattr(config, "clusters", None) or []:
        kind = getattr(cluster, "kind", None)
        if kind not in kinds:
            continue
        backend = None
        if pm is not None:
            backend = pm.hook.flotilla_cluster_backend(cluster_config=cluster, config=config)
        if backend is None and kind == "kubernetes":
            backend = backend_from_config(cluster, config, **kwargs)
        if backend is None:
            raise ValueError(f"no backend for cluster {cluster.name!r} of kind {kind!r}")
        backends[cluster.name] = backend
    return backends


__all__ = ["KubernetesBackendPlugin", "make_backends"]
