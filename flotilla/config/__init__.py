"""Configuration: pydantic models of the YAML users write, loaded with line numbers for errors."""

from flotilla.config.errors import ConfigError
from flotilla.config.loader import DEFAULT_CONFIG_YAML, load_config, parse_config
from flotilla.config.models import (
    KNOWN_ACTIONS,
    ClusterConfig,
    FlotillaConfig,
    KubernetesClusterConfig,
    NodeGroupConfig,
    PluginConfig,
    PriorityClassConfig,
    QueueConfig,
    SimulatedClusterConfig,
    TaintConfig,
    TolerationConfig,
)
from flotilla.config.source import SourceMap, load_yaml, read_yaml_file
from flotilla.config.state import load_state

__all__ = [
    "ConfigError", "DEFAULT_CONFIG_YAML", "KNOWN_ACTIONS", "ClusterConfig", "FlotillaConfig",
    "KubernetesClusterConfig", "NodeGroupConfig", "PluginConfig", "PriorityClassConfig", "QueueConfig",
    "SimulatedClusterConfig", "SourceMap", "TaintConfig", "TolerationConfig", "load_config", "load_state",
    "load_yaml", "parse_config", "read_yaml_file",
]
