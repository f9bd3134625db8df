"""One cycle, as data: ``Scheduler.run_cycle(snapshot) -> Decisions``.

The scheduler strings the config's actions together over one session per
cycle, with the config's plugins loaded once. It sits above both the core
and the actions: the core (sessions, the node index, statements) knows no
action, and actions know the core only.

The same code path serves ``schedule-once``, ``simulate`` and ``serve``:
only where the snapshot comes from and what receives the decisions differ.

A plugin's failure (:class:`~flotilla.core.extensions.PluginFailed`) is
isolated where the actions catch it (the job or queue it was asked about
waits); one in ``flotilla_session_open`` or ``flotilla_session_close``, or
one an action does not isolate, fails the cycle closed: :meth:`Scheduler.run_cycle`
raises it and nothing of the cycle is decided. Either way each distinct
failure is logged at most once per :data:`LOG_EVERY` seconds.
"""

from __future__ import annotations

import gc
import random
import time
from typing import Callable, Mapping, Sequence

import structlog

from flotilla.actions import ActionNameConflict, get_action
from flotilla.core.decisions import Decisions
from flotilla.core.extensions import PluginFailed
from flotilla.core.handover import BackendSink, LeaseSink
from flotilla.core.logs import ensure_configured
from flotilla.core.model import PriorityClass, Queue, Snapshot
from flotilla.plugin_manager import PluginError, load_plugins
from flotilla.core.cyclestate import CycleState
from flotilla.core.session import Session, SessionError, SessionSettings
from flotilla.core.shares import share_weights

log = structlog.get_logger("flotilla.cycle")

#: Seconds between two log lines for one distinct plugin failure (plugin, point, error).
LOG_EVERY = 60.0


def session_settings(config) -> SessionSettings:
    """The config values a session reads, as plain values (no pydantic in the hot path)."""
    return SessionSettings(
        evict_probability=config.evict.probability,
        evict_protected_fraction=config.evict.protected_fraction_of_fair_share,
        queue_protected_fractions={q.name: q.protected_fraction_of_fair_share for q in config.queues
                                   if getattr(q, "protected_fraction_of_fair_share", None) is not None},
        lookahead=config.allocate.lookahead,
        node_candidates=getattr(config.allocate, "node_candidates", 16),
        percentage_of_nodes_to_score=getattr(config.allocate, "percentage_of_nodes_to_score", 0),
        score_weights={p.name: p.weight for p in config.plugins if getattr(p, "weight", None) is not None},
        preempt_max_candidates=config.preempt.max_candidates,
        indexed_resources=tuple(config.node_index.indexed_resources),
        reservation_after=config.reservation.after,
        reservation_max_units=config.reservation.max_units,
        share_weights=share_weights(config.plugins),
    )


def _action_entry(entry) -> tuple[str, Mapping]:
    """``(name, args)`` of an ``actions`` entry: a name, a config entry (``name``, ``args``), or a pair."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, tuple):
        return entry
    return entry.name, entry.args


#: The action that hands a cycle's decisions to the clusters.
HAND_OVER = "lease"


class Scheduler:
    """Plugins loaded once, actions in order, one session per cycle.

    Raises :class:`~flotilla.plugin_manager.PluginError` for a plugin that
    cannot be loaded and :class:`SessionError` when the plugins together do
    not provide what the actions need (exactly one fairness policy), both at
    construction, before any state is touched.
    """

    def __init__(self, config, actions: Sequence[str] | None = None, keep_state: bool = True):
        ensure_configured()
        #: What lives between cycles (node index, running jobs, queue orders); None: rebuilt every cycle.
        self.keep_state = keep_state
        self.state: CycleState | None = None
        self.config = config
        self.settings = session_settings(config)
        self.pm = load_plugins([(p.name, p.args) for p in config.plugins])
        entries = [_action_entry(entry) for entry in (actions if actions is not None else config.actions)]
        self.actions = []
        for index, (name, args) in enumerate(entries):
            if name == "preempt" and not getattr(config.preempt, "enabled", True):
                continue  # preempt.enabled: false turns urgency off
            try:
                self.actions.append(get_action(name, args))
            except KeyError:
                raise PluginError(index, "actions", f"unknown action {name!r}") from None
            except ActionNameConflict as exc:
                raise PluginError(index, "actions", str(exc)) from None
            except (ValueError, TypeError) as exc:
                raise PluginError(index, "actions.args", f"action {name!r}: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - a package action that cannot be imported or built: one line
                raise PluginError(index, "actions", f"action {name!r} failed to load: {type(exc).__name__}: "
                                                    f"{exc}") from None
        #: (plugin, point, error) -> (when it was last logged, failures since then not logged).
        self._logged: dict[tuple[str, str, str], tuple[float, int]] = {}
        self.clock: Callable[[], float] = time.monotonic
        #: (the hook's implementations, :meth:`_session_openers`' answer for them).
        self._openers: tuple[list, list[tuple[str, Callable, bool]]] | None = None
        probe = Snapshot([], [], [], self.priority_classes(), config.default_priority_class)
        try:
            opened = self._open(probe, random.Random(0))
        except PluginFailed as failure:
            # Before any cycle: a plugin that cannot open a session on an empty snapshot is a load error.
            index = next((i for i, p in enumerate(config.plugins) if p.name == failure.plugin), 0)
            raise PluginError(index, "name", failure.reason) from None
        opened.check_registrations()
        for index, plugin in enumerate(config.plugins):
            if getattr(plugin, "weight", None) is not None and plugin.name not in opened.score_plugins:
                raise PluginError(index, "weight", f"plugin {plugin.name!r} registers no node score: a weight "
                                                   f"multiplies node scores only")

    def priority_classes(self) -> list[PriorityClass]:
        return [PriorityClass(pc.name, pc.priority, pc.preemptible) for pc in self.config.priority_classes]

    def queues(self) -> list[Queue]:
        return [q.to_core() for q in self.config.queues]

    def open_session(self, snapshot: Snapshot) -> Session:
        """A session on ``snapshot`` with the plugins' callables registered, for questions outside a cycle."""
        return self._open(snapshot, random.Random(0))

    def _open(self, snapshot: Snapshot, rng: random.Random, sink: LeaseSink | None = None,
              state: CycleState | None = None) -> Session:
        session = Session(snapshot, self.settings, rng, self.pm.get_plugins(), state)
        #: Where the lease action hands the decisions (flotilla.core.handover); None: nowhere (schedule-once).
        session.lease_sink = sink
        # Each plugin's implementation in turn, in config order (the order pluggy calls them), so that what one
        # registers is known to be its: a node score takes its plugin's weight, and every callable is guarded in
        # its name (flotilla.core.extensions.guard). A raise here fails the cycle closed, naming the plugin.
        for name, function, takes_session in self._session_openers():
            session.opening_plugin = name
            try:
                if takes_session:
                    function(session)
                else:
                    function()
            except Exception as exc:
                raise PluginFailed(name, "flotilla_session_open", exc, scope="cycle") from exc
            finally:
                session.opening_plugin = None
        return session

    def _session_openers(self) -> list[tuple[str, Callable, bool]]:
        """The ``flotilla_session_open`` implementations in the order pluggy calls them, as (plugin name,
        function, whether it takes the session), read again only when the plugins registered change."""
        impls = self.pm.hook.flotilla_session_open.get_hookimpls()
        cached = self._openers
        if cached is None or cached[0] != impls:
            # An implementation whose body is empty (a plugin that registers nothing) is not called.
            cached = self._openers = (impls, [(impl.plugin_name, impl.function, "session" in impl.argnames)
                                              for impl in reversed(impls)
                                              if getattr(impl.function, "__code__", None) is None
                                              or impl.function.__code__.co_code != _empty.__code__.co_code])
        return cached[1]

    def hands_over(self) -> bool:
        """Whether the configured actions include ``lease``: without it no decision leaves the session.
        ``schedule-once``, ``serve`` and ``simulate`` all run :attr:`actions`; what the lease does differs only by
        the sink each gives :meth:`run_cycle` (flotilla.core.handover)."""
        return any(getattr(action, "name", "") == HAND_OVER for action in self.actions)

    def run_cycle(self, snapshot: Snapshot, rng: random.Random | None = None,
                  backends: Mapping | None = None, actions: Sequence | None = None, head: int = 0,
                  head_key: Callable | None = None, sink: LeaseSink | None = None) -> Decisions:
        """Run the actions on ``snapshot``; the lease action hands the decisions to ``sink``, or with
        ``backends`` (by cluster name) and no sink, to those backends (:class:`~flotilla.core.handover.BackendSink`).

        With ``head``, the decisions also hold each queue's first ``head``
        waiting jobs in order (``Decisions.heads``; distinct by ``head_key``).

        Python's cyclic garbage collector is paused for the cycle: a cycle
        allocates hundreds of thousands of small tuples (heap entries, index
        keys) and makes almost no reference cycles, and with a million jobs
        alive each full collection walks them all; measured, the pauses took
        two thirds of building a 320,000-job queue. Plain reference counting
        still frees everything as usual; collection resumes after the cycle.
        """
        paused = gc.isenabled()
        gc.disable()
        try:
            if sink is None and backends:
                sink = BackendSink(backends)
            return self._run_cycle(snapshot, rng, sink, actions, head, head_key)
        finally:
            if paused:
                gc.enable()

    def _run_cycle(self, snapshot: Snapshot, rng: random.Random | None, sink: LeaseSink | None,
                   actions: Sequence | None, head: int = 0, head_key: Callable | None = None) -> Decisions:
        started = time.perf_counter()
        state = self.state if self.state is not None else CycleState()
        self.state = None  # until the cycle ends well: a failure part-way leaves no half-changed state
        try:
            session = self._open(snapshot, rng or random.Random(0), sink, state)
        except PluginFailed as failure:
            self.log_failures({(failure.plugin, failure.point, failure.error): 1})
            raise
        session.check_registrations()
        opened = time.perf_counter()
        try:
            for action in actions if actions is not None else self.actions:
                action.execute(session)
            decisions = session.close(head, head_key)
            decisions.plugin_errors = dict(session.plugin_errors)
            for impl in reversed(self.pm.hook.flotilla_session_close.get_hookimpls()):
                kwargs = {"session": session, "decisions": decisions}
                try:
                    impl.function(*[kwargs[name] for name in impl.argnames])
                except Exception as exc:
                    raise PluginFailed(impl.plugin_name, "flotilla_session_close", exc, scope="cycle") from exc
        except PluginFailed as failure:
            # Not isolated by an action, or in the closing hook: the cycle fails closed.
            session.plugin_errors[(failure.plugin, failure.point, failure.error)] = \
                session.plugin_errors.get((failure.plugin, failure.point, failure.error), 0) + 1
            self.log_failures(session.plugin_errors)
            failure.errors = dict(session.plugin_errors)
            raise
        self.log_failures(session.plugin_errors)
        if self.keep_state:
            state.commit_cycle(session)
            self.state = state
        decisions.timings["open"] = opened - started
        decisions.timings["total"] = time.perf_counter() - started
        log.info("cycle", queued=len(snapshot.queued), running=len(session.running),
                 considered=session.counters.get("considered", 0), scheduled=len(decisions.scheduled),
                 preempted=len(decisions.preempted), evicted=session.counters.get("evicted", 0),
                 **{f"{name}_s": round(seconds, 4) for name, seconds in decisions.timings.items()})
        return decisions

    def log_failures(self, errors: Mapping[tuple[str, str, str], int]) -> None:
        """One warning per distinct plugin failure per :data:`LOG_EVERY` seconds, with how many it stands for."""
        if not errors:
            return
        now = self.clock()
        for key, count in errors.items():
            last = self._logged.get(key)
            if last is not None and now - last[0] < LOG_EVERY:
                self._logged[key] = (last[0], last[1] + count)
                continue
            unlogged = last[1] if last is not None else 0
            plugin, point, error = key
            log.warning("plugin.failed", plugin=plugin, point=point, error=error, failures=count + unlogged)
            self._logged[key] = (now, 0)


def _empty(session) -> None:
    """A hook implementation with nothing in it (the code :meth:`Scheduler._session_openers` leaves out)."""


__all__ = ["Scheduler", "SessionError", "session_settings"]
