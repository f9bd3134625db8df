"""Resource names a config refers to (weights, limits, indexed resources) must be ones something has.

A misspelt name (``memroy``) in a queue's limits or in ``resourceWeights``
would otherwise be accepted and silently do nothing: no node has it, no job
asks for it, so the limit never binds and the weight never counts. A name
is accepted when

* a node of a configured cluster (a simulated cluster's node groups, a node
  template) or, for a state file or workload, one of its nodes or jobs has it;
* or a Kubernetes node could report it whatever the config says: the names
  Kubernetes defines without a domain (``cpu``, ``memory``,
  ``ephemeral-storage``, ``pods``, ``storage``, ``hugepages-<size>``,
  ``attachable-volumes-<plugin>``), and every name with a domain prefix
  (``nvidia.com/gpu``, ``example.com/licence``): extended resources come
  from device plugins and the API server, which the config cannot know.

Any other name is refused with a did-you-mean at its line. ``pods`` is
refused too: it counts a node's pod slots (:mod:`flotilla.core.resources`),
which no queue is weighed, limited or indexed by.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from flotilla.config.pluginargs import RESOURCE_LIST_PLUGINS

if TYPE_CHECKING:
    from flotilla.config.errors import FieldPath
    from flotilla.config.models import FlotillaConfig, QueueConfig

#: Names Kubernetes defines without a domain prefix that a node reports (its capacity and allocatable).
KUBERNETES_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods", "storage")
POD_SLOTS_NOT_WEIGHED = ("pods counts each node's pod slots (kube-scheduler's Too many pods), not a resource "
                         "queues are weighed, limited or indexed by")
#: Families of such names: ``hugepages-2Mi``, ``hugepages-1Gi``; ``attachable-volumes-aws-ebs`` and the like.
_KUBERNETES_FAMILIES = re.compile(r"(?:hugepages-|attachable-volumes-)[A-Za-z0-9][-A-Za-z0-9.]*")


def any_cluster_may_have(name: str) -> bool:
    """True for a name a Kubernetes node could report whatever the config says (see the module docstring)."""
    return "/" in name or name in KUBERNETES_RESOURCES or _KUBERNETES_FAMILIES.fullmatch(name) is not None


def config_resource_names(config: FlotillaConfig) -> list[tuple[FieldPath, str]]:
    """Every resource name the config refers to, with its field path.

    Queue limits, any plugin's ``resourceWeights`` (the weights argument of
    ``assetfairness``, ``decayedusage`` and plugins built on
    ``flotilla.plugin.parse_weights``), ``drf``'s ``resources`` and
    ``nodeIndex.indexedResources``.
    """
    names = queue_limit_names("queues", config.queues)
    for p, plugin in enumerate(config.plugins):
        args = plugin.args or {}
        weights = args.get("resourceWeights")
        if isinstance(weights, Mapping):
            names += [(("plugins", p, "args", "resourceWeights", str(name)), str(name)) for name in weights]
        resources = args.get("resources")
        if plugin.name in RESOURCE_LIST_PLUGINS and isinstance(resources, list):
            names += [(("plugins", p, "args", "resources", r), name) for r, name in enumerate(resources)
                      if isinstance(name, str)]
    names += [(("nodeIndex", "indexedResources", r), name)
              for r, name in enumerate(config.node_index.indexed_resources)]
    return names


def queue_limit_names(section: str, queues: Iterable[QueueConfig]) -> list[tuple[FieldPath, str]]:
    """The resource names of the queues' limits, with their field paths under ``section``."""
    return [((section, q, "limits", name), name) for q, queue in enumerate(queues) for name in queue.limits]


def config_provided_names(config: FlotillaConfig) -> set[str]:
    """The resource names the config's own nodes have: simulated clusters' node groups and node templates."""
    names: set[str] = set()
    for cluster in config.simulated_clusters():
        for group in cluster.nodes:
            names.update(group.resources)
    for template in config.node_templates:
        names.update(template.resources)
    return names


def names_in(resource_maps: Iterable[Mapping[str, Any]]) -> set[str]:
    """The keys of many resource mappings (nodes' resources, jobs' requests), once each (shared maps read once)."""
    names: set[str] = set()
    seen: set[int] = set()
    for resources in resource_maps:
        if id(resources) not in seen:
            seen.add(id(resources))
            names.update(resources)
    return names


def unknown_resource_problems(named: Iterable[tuple[FieldPath, str]], known: set[str],
                              where: str = "no cluster has it") -> list[tuple[FieldPath, str]]:
    """``(path, message)`` for every name of ``named`` that is neither in ``known`` nor one any cluster may have.

    ``where`` says what was looked at (``no cluster has it``, ``no cluster
    has it and no job asks for it``).
    """
    problems: list[tuple[FieldPath, str]] = []
    candidates: list[str] | None = None
    for path, name in named:
        if name == "pods":
            problems.append((path, POD_SLOTS_NOT_WEIGHED))
            continue
        if name in known or any_cluster_may_have(name):
            continue
        if candidates is None:
            candidates = sorted(known | set(KUBERNETES_RESOURCES))
        close = difflib.get_close_matches(name, candidates, n=1)
        hint = (f"did you mean {close[0]!r}?" if close else
                f"known: {', '.join(candidates)}; an extended resource has a domain prefix, e.g. example.com/{name}")
        problems.append((path, f"unknown resource {name!r}: {where} ({hint})"))
    return problems


def config_problems(config: FlotillaConfig) -> list[tuple[FieldPath, str]]:
    """The config's unknown resource names, when it lists its clusters; without clusters (a ``schedule-once``
    state file brings them) the check waits for :func:`deferred_config_problems`."""
    if not config.clusters:
        return []
    return unknown_resource_problems(config_resource_names(config), config_provided_names(config))


def deferred_config_problems(config: FlotillaConfig, known: set[str]) -> list[tuple[FieldPath, str]]:
    """For a config without clusters: its unknown resource names, ``known`` being what the nodes and jobs that
    came with it (a state file's) have."""
    if config.clusters:
        return []
    return unknown_resource_problems(config_resource_names(config), known | config_provided_names(config),
                                     "no cluster has it and no job asks for it")


__all__ = ["KUBERNETES_RESOURCES", "any_cluster_may_have", "config_problems", "config_provided_names",
           "config_resource_names", "deferred_config_problems", "names_in", "queue_limit_names",
           "unknown_resource_problems"]
