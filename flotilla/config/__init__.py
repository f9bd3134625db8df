"""Configuration: pydantic models of the YAML users write, loaded with line numbers for errors.

Public entry points: :func:`load_config` (scheduler config, or the built-in
default), :func:`load_state` (a ``schedule-once`` state file, to a core
``Snapshot``), and :class:`ConfigError` (``file:line: path: message``).

Internal: not part of the plugin API (:mod:`flotilla.plugin`, :mod:`flotilla.testing`); may change in any release.
"""

from flotilla.config.errors import ConfigError, format_path
from flotilla.config.loader import DEFAULT_CONFIG_NAME, DEFAULT_CONFIG_YAML, load_config, parse_config, validate_config
from flotilla.config.models import (
    KNOWN_ACTIONS,
    AllocateConfig,
    AuthConfig,
    ClusterConfig,
    CycleConfig,
    DeadlinesConfig,
    Duration,
    EvictConfig,
    FlotillaConfig,
    GracePeriodConfig,
    KubernetesClusterConfig,
    LeaseConfig,
    NodeGroupConfig,
    NodeIndexConfig,
    PluginConfig,
    PreemptConfig,
    PriorityClassConfig,
    Quantities,
    QueueConfig,
    ServerConfig,
    SimulatedClusterConfig,
    StoreConfig,
    TaintConfig,
    TokenConfig,
    TolerationConfig,
    expand_cluster,
)
from flotilla.config.source import SourceMap, load_yaml, read_yaml_file
from flotilla.config.state import (
    GangConfig,
    StateCluster,
    StateFile,
    StateJob,
    StateNode,
    build_snapshot,
    load_state,
    parse_state,
)

__all__ = [
    "AllocateConfig", "AuthConfig", "ClusterConfig", "ConfigError", "CycleConfig", "DEFAULT_CONFIG_NAME",
    "DEFAULT_CONFIG_YAML", "DeadlinesConfig", "Duration", "EvictConfig", "FlotillaConfig", "GangConfig",
    "GracePeriodConfig", "KNOWN_ACTIONS", "KubernetesClusterConfig", "LeaseConfig", "NodeGroupConfig",
    "NodeIndexConfig", "PluginConfig", "PreemptConfig", "PriorityClassConfig", "Quantities", "QueueConfig",
    "ServerConfig", "SimulatedClusterConfig", "SourceMap", "StateCluster", "StateFile", "StateJob", "StateNode",
    "StoreConfig", "TaintConfig", "TokenConfig", "TolerationConfig", "build_snapshot", "expand_cluster",
    "format_path", "load_config", "load_state", "load_yaml", "parse_config", "parse_state", "read_yaml_file",
    "validate_config",
]
