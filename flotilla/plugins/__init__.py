"""Built-in plugins, one module each, registered by name like any third-party plugin.

Every plugin is a class taking its ``args`` mapping from the config; it
implements :func:`flotilla.core.hookspecs.flotilla_session_open` and registers
its callables there. See :mod:`flotilla.plugin_manager` for how names are
found: through the ``flotilla.plugins`` entry-point group, as a third party's.

Internal: not part of the plugin API (:mod:`flotilla.plugin`, :mod:`flotilla.testing`); may change in any release.
"""
