"""The contract between actions and plugins.

Two kinds of extension live here:

* **pluggy hooks** (``flotilla_*``), called a handful of times per cycle.
  The main one is :func:`flotilla_session_open`, where a plugin registers its
  callables on the session, as Volcano plugins do in ``OnSessionOpen``.
* **extension points**: the typed callables registered there. Actions call
  them through the session in their inner loops, where a pluggy call (a few
  microseconds each) would cost too much. Each is declared once, with its
  contract and combine rule, in :mod:`flotilla.core.extensions`.

Plugin authors: a plugin is a class taking its ``args`` mapping (from the
YAML config) in ``__init__``, with methods marked :data:`hookimpl`. Built-in
plugins are registered exactly like third-party ones; a package exposes a
plugin through the ``flotilla.plugins`` entry-point group.
"""

from __future__ import annotations

import pluggy

PROJECT = "flotilla"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def flotilla_session_open(session):
    """A session is opening on a snapshot: register this plugin's callables.

    Called once per cycle, in plugin order, before any action runs. Use the
    ``session.add_*`` methods listed in
    :data:`flotilla.core.extensions.EXTENSION_POINTS`. The session
    is fully built (queues, nodes, running jobs); reading it is cheap. Do not
    change it here.
    """


@hookspec
def flotilla_session_close(session, decisions):
    """The session has closed; ``decisions`` is what it decided.

    Called once per cycle after the last action, in plugin order. Plugins
    that keep figures across cycles (decayed usage, say) update them here.
    The return value is ignored.
    """


@hookspec(firstresult=True)
def flotilla_cluster_backend(cluster_config, config, options):
    """Return a cluster backend for ``cluster_config``, or ``None`` if its ``kind`` is not yours.

    ``cluster_config`` is one entry of the config's ``clusters`` list,
    ``config`` the whole config, ``options`` what the caller's run needs of
    every backend (a mapping; ``clock``: a function giving the time the
    backend should act on, ``duration_of``: a job's run time on a
    simulated cluster, or None; ``exit_code_of``: the exit code a job
    fails with at its end on a simulated cluster, or None to succeed);
    take what applies, ignore the rest.

    ``firstresult``: the first plugin that answers wins. Plugins of the
    config's ``plugins`` list are asked first, in config order, then the
    built-in backends (``simulated``, ``kubernetes``), then the kinds
    packages provide, so a plugin can replace a built-in kind's backend
    without touching the scheduler. A package serves a kind of its own
    through the ``flotilla.backends`` entry-point group instead (the
    config then knows the kind and checks its ``args``; docs/backends.md).
    Called once per cluster when a run starts
    (:func:`flotilla.plugin_manager.make_backends`), not per cycle.
    """
