"""Kubernetes clusters behind the cluster-backend protocol.

* :mod:`flotilla.kubernetes.backend`: :class:`KubernetesCluster`, one cluster
  (informers, pod writes, job events), a package of one module per part;
* :mod:`flotilla.kubernetes.pods`: jobs as pods and back (labels, annotations);
* :mod:`flotilla.kubernetes.client`: JSON over the official client's connection pool;
* :mod:`flotilla.kubernetes.runner`: a scheduler loop with jobs in memory.

``kind: kubernetes`` entries of a config become backends through the
``flotilla_cluster_backend`` hook: :class:`KubernetesBackendPlugin` is one of
the built-in backends every plugin manager holds
(:data:`flotilla.plugin_manager.BUILTIN_BACKENDS`), asked after the config's
own plugins; :func:`flotilla.plugin_manager.make_backends` asks the hook.

Internal: not part of the plugin API (:mod:`flotilla.plugin`, :mod:`flotilla.testing`); may change in any release.
"""

from __future__ import annotations

from flotilla.core.hookspecs import hookimpl


class KubernetesBackendPlugin:
    """Answers ``flotilla_cluster_backend`` for ``kind: kubernetes`` clusters."""

    @hookimpl
    def flotilla_cluster_backend(self, cluster_config, config):
        if getattr(cluster_config, "kind", None) != "kubernetes":
            return None
        from flotilla.kubernetes.backend import backend_from_config
        return backend_from_config(cluster_config, config)


__all__ = ["KubernetesBackendPlugin"]
