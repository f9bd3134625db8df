"""Flotilla: a batch-job scheduler for one or many Kubernetes clusters."""
__version__ = "0.1.0"
