"""The scheduling core: model, quantities, node index, session, statement, hookspecs, backends.

Internal: not part of the plugin API (:mod:`flotilla.plugin`, :mod:`flotilla.testing`); may change in any release.
"""
