"""Host ports held per node, as kube-scheduler's NodePorts plugin keeps them apart.

A port is ``(protocol, port, host IP)``. Two pods on one node conflict when
they bind the same protocol and port and their host IPs overlap:
``0.0.0.0`` (what an empty host IP means) overlaps every IP, and two
different specific IPs do not (``HostPortInfo.CheckConflict``). So one
pod may bind ``54321/TCP`` on ``127.0.0.1`` beside another on
``127.0.0.2`` and a third binding ``54321/UDP``; none binds ``54321/TCP`` on
``0.0.0.0`` beside any of the first two.

A kubelet refuses a pod whose host port another pod on the node already
binds, so the rule is per node, not per node type: it cannot be a
predicate (those see node types) and is checked node by node, only for
jobs that bind host ports (``Job.host_ports``; nearly every job binds
none and never reaches this module).

The cycle state keeps one :class:`HostPorts` between cycles beside the node
index and changes it wherever a job is bound to or taken off a node
(running jobs, placements, preemptions, and their undoing), and for the
host ports of pods Flotilla did not place (``ClusterSnapshot.foreign_ports``),
so it always says what the index says.
"""

from __future__ import annotations

from typing import Iterable, Sequence

#: ``(protocol, port, host IP)``; the IP is :data:`ANY_IP` when the pod names none.
Port = tuple[str, int, str]

#: The host IP that binds every address: an empty ``hostIP`` means it.
ANY_IP = "0.0.0.0"


def host_port(protocol: str | None, port: int, ip: str | None) -> Port:
    """A port as the plugin sanitises it: protocol ``TCP`` and host IP ``0.0.0.0`` when not given."""
    return (protocol or "TCP", int(port), ip or ANY_IP)


class HostPorts:
    """Node position -> ``{(protocol, port): {host IP: holder}}`` for the nodes where something holds a host port."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: dict[int, dict[tuple[str, int], dict[str, str]]] = {}

    def __bool__(self) -> bool:
        return bool(self.held)

    def add(self, node: int, holder: str, ports: Sequence[Port]) -> None:
        if not ports:
            return
        here = self.held.get(node)
        if here is None:
            here = self.held[node] = {}
        for protocol, number, ip in ports:
            ips = here.get((protocol, number))
            if ips is None:
                here[(protocol, number)] = {ip: holder}
            else:
                ips[ip] = holder

    def remove(self, node: int, holder: str, ports: Iterable[Port]) -> None:
        here = self.held.get(node)
        if here is None:
            return
        for protocol, number, ip in ports:
            ips = here.get((protocol, number))
            if ips is not None and ips.get(ip) == holder:
                del ips[ip]
                if not ips:
                    del here[(protocol, number)]
        if not here:
            del self.held[node]

    def free(self, node: int, ports: Sequence[Port]) -> bool:
        """Whether none of ``ports`` conflicts with a port held on ``node``."""
        here = self.held.get(node)
        if here is None:
            return True
        for protocol, number, ip in ports:
            ips = here.get((protocol, number))
            if ips and (ip == ANY_IP or ANY_IP in ips or ip in ips):
                return False
        return True

    def holders(self, node: int, ports: Sequence[Port]) -> set[str]:
        """Who holds a port on ``node`` that conflicts with one of ``ports``."""
        here = self.held.get(node) or {}
        found: set[str] = set()
        for protocol, number, ip in ports:
            ips = here.get((protocol, number))
            if not ips:
                continue
            if ip == ANY_IP:
                found.update(ips.values())
            else:
                found.update(ips[k] for k in (ANY_IP, ip) if k in ips)
        return found

    def remap(self, moved: Sequence[int]) -> None:
        """Nodes renumbered (``moved[old]`` is the new position, -1 removed)."""
        self.held = {moved[node]: ports for node, ports in self.held.items() if moved[node] >= 0}


def describe(ports: Sequence[Port]) -> str:
    """``8080/TCP, 53/UDP on 10.0.0.1``: the host IP only when the port names one."""
    return ", ".join(f"{port}/{protocol}" + ("" if ip == ANY_IP else f" on {ip}") for protocol, port, ip in ports)


__all__ = ["ANY_IP", "HostPorts", "Port", "describe", "host_port"]
