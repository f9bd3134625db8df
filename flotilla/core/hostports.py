"""Host ports held per node: no two pods bind one ``(protocol, port)`` on a node.

A kubelet refuses a pod whose host port another pod on the node already
binds, so the rule is per node, not per node type: it cannot be a
predicate (those see node types) and is checked node by node, only for
jobs that bind host ports (``Job.host_ports``; nearly every job binds
none and never reaches this module).

The cycle state keeps one :class:`HostPorts` between cycles beside the node
index and changes it wherever a job is bound to or taken off a node
(running jobs, placements, preemptions, and their undoing), so it always
says what the index says.
"""

from __future__ import annotations

from typing import Iterable, Sequence

Port = tuple[str, int]


class HostPorts:
    """Node position -> ``{(protocol, port): holder}`` for the nodes where some job holds a host port."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: dict[int, dict[Port, str]] = {}

    def __bool__(self) -> bool:
        return bool(self.held)

    def add(self, node: int, holder: str, ports: Iterable[Port]) -> None:
        here = self.held.get(node)
        if here is None:
            here = self.held[node] = {}
        for port in ports:
            here[port] = holder

    def remove(self, node: int, holder: str, ports: Iterable[Port]) -> None:
        here = self.held.get(node)
        if here is None:
            return
        for port in ports:
            if here.get(port) == holder:
                del here[port]
        if not here:
            del self.held[node]

    def free(self, node: int, ports: Sequence[Port]) -> bool:
        """Whether none of ``ports`` is held on ``node``."""
        here = self.held.get(node)
        return here is None or not any(port in here for port in ports)

    def holders(self, node: int, ports: Sequence[Port]) -> set[str]:
        """Who holds any of ``ports`` on ``node``."""
        here = self.held.get(node) or {}
        return {here[port] for port in ports if port in here}

    def remap(self, moved: Sequence[int]) -> None:
        """Nodes renumbered (``moved[old]`` is the new position, -1 removed)."""
        self.held = {moved[node]: ports for node, ports in self.held.items() if moved[node] >= 0}


def describe(ports: Sequence[Port]) -> str:
    return ", ".join(f"{port}/{protocol}" for protocol, port in ports)


__all__ = ["HostPorts", "Port", "describe"]
