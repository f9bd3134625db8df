"""Alternative policies and examples for plugin authors.

Each module here is a complete plugin registered by name in the
``flotilla.plugins`` entry-point group, written to be read: start with
:mod:`flotilla.contrib.drf`.

Internal: not part of the plugin API (:mod:`flotilla.plugin`, :mod:`flotilla.testing`); may change in any release.
"""
