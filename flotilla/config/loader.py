"""Loading the scheduler config, or the built-in default when there is none.

The default is YAML text rather than model defaults so that it goes through
exactly the same validation as a user's file, and so ``flotilla`` on a new
machine runs the spec's example setup with nothing else installed.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError

from flotilla.config.models import FlotillaConfig
from flotilla.config.source import SourceMap, load_yaml, read_yaml_file

DEFAULT_CONFIG_NAME = "<built-in default>"

DEFAULT_CONFIG_YAML = """\
actions: [evict, allocate, preempt, lease]
plugins:
  - name: assetfairness
    args: {resourceWeights: {cpu: 1, nvidia.com/gpu: 1, memory: 0}}
  - name: bestfit
  - name: gang
  - name: priorityclass
  - name: predicates
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
  - {name: armada-preemptible, priority: 20000, preemptible: true}
defaultPriorityClass: armada-default
queues:
  - {name: A, weight: 1}
  - {name: B, weight: 1}
evict: {probability: 1.0}
allocate: {lookahead: 1000}
lease: {timeout: 60s}
gracePeriod: {default: 30s, max: 300s}
deadlines: {cpu: 3d, gpu: 14d}
cycle: {period: 1s}
clusters:
  - name: sim
    kind: simulated
    nodes:
      - {count: 2, namePrefix: node, resources: {cpu: 32, memory: 128Gi}}
store: {url: "sqlite:///flotilla.db"}
"""


def parse_config(text: str, file: str | None) -> FlotillaConfig:
    """Validate config text; ``file`` is only the name errors show."""
    return validate_config(*load_yaml(text, file))


def load_config(path: str | os.PathLike | None = None) -> FlotillaConfig:
    """The config at ``path``, or the built-in default (:data:`DEFAULT_CONFIG_YAML`) for ``None``."""
    if path is None:
        return parse_config(DEFAULT_CONFIG_YAML, DEFAULT_CONFIG_NAME)
    return validate_config(*read_yaml_file(path))


def validate_config(data: dict[str, Any], source: SourceMap) -> FlotillaConfig:
    """Loaded YAML to a config; the first problem in the file becomes a :class:`ConfigError` at its line and path.

    The config keeps ``source`` as ``config.source``, so problems found
    later (an unknown plugin, say) can still point at their line.
    """
    try:
        config = FlotillaConfig.model_validate(data)
    except ValidationError as exc:
        raise source.from_validation(exc, FlotillaConfig) from None
    config._source = source
    error = source.first(config.check())
    if error is not None:
        raise error
    return config


__all__ = ["DEFAULT_CONFIG_NAME", "DEFAULT_CONFIG_YAML", "load_config", "parse_config", "validate_config"]
