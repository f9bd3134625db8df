"""Loading the scheduler config, or the built-in default when there is none."""

from __future__ import annotations

import os

from pydantic import ValidationError

from flotilla.config.errors import ConfigError
from flotilla.config.models import FlotillaConfig
from flotilla.config.source import load_yaml, read_yaml_file

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
gracePeriod: {default: 1s, max: 300s}
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
    """Validate config text; the first problem becomes a :class:`ConfigError` naming its line and path."""
    data, source = load_yaml(text, file)
    try:
        config = FlotillaConfig.model_validate(data)
    except ValidationError as exc:
        raise source.from_validation(exc) from None
    config._source = source
    problems = config.check()
    if problems:
        path, message = min(problems, key=lambda p: source.line_of(p[0]) or 0)
        raise source.error(path, message)
    return config


def load_config(path: str | os.PathLike | None = None) -> FlotillaConfig:
    """The config at ``path``, or the built-in default for ``None``."""
    if path is None:
        return parse_config(DEFAULT_CONFIG_YAML, DEFAULT_CONFIG_NAME)
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise ConfigError("no such file", name) from None
    return parse_config(text, name)


__all__ = ["DEFAULT_CONFIG_YAML", "load_config", "parse_config", "read_yaml_file"]
