"""Flotilla: a batch-job scheduler for one or many Kubernetes clusters.

The public Python API: :mod:`flotilla.plugin` (what a plugin imports, with
its stability promise) and :mod:`flotilla.testing` (pytest fixtures) for
plugin authors, :mod:`flotilla.client` for programs that talk to the HTTP
API. Every other module is internal.
"""
__version__ = "0.1.0"
