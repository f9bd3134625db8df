"""Flotilla: a batch-job scheduler for one or many Kubernetes clusters.

The public API for plugin authors is :mod:`flotilla.plugin` (with its
stability promise) and :mod:`flotilla.testing` (pytest fixtures); every other
module is internal.
"""
__version__ = "0.1.0"
