"""Local KWOK clusters for trying Flotilla on fake nodes.

Internal: not part of the plugin API (:mod:`flotilla.plugin`, :mod:`flotilla.testing`); may change in any release.
"""
