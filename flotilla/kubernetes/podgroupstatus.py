"""PodGroup status written back as Volcano writes it, so that ``kubectl get podgroup`` shows the group's state.

Volcano's ``PodGroupStatus`` (volcano-sh/apis, ``scheduling/v1beta1``):
``phase`` (Pending, Inqueue, Running, Unknown, Completed), ``running``,
``succeeded``, ``failed`` (pod counts) and ``conditions`` (``type``,
``status``, ``reason``, ``message``, ``transitionID``,
``lastTransitionTime``). Flotilla writes, from the group's pods that name
it as their scheduler (:class:`GroupMembers`, kept from the pod watch):

* Completed: every pod has finished;
* Running: ``minMember`` pods are bound (or running, or succeeded), with a
  ``Scheduled=True`` condition;
* Inqueue: the gang is stored in its queue and waits for room, with an
  ``Unschedulable=True`` condition, reason ``NotEnoughResources`` and the
  scheduler's reason as message;
* Pending: fewer than ``minMember`` pods exist (reason ``NotEnoughTasks``)
  or the pods are refused (reason ``NotEnoughResources`` is not claimed:
  the reason is ``Unschedulable``, the message says why).

The status is written with a merge patch of the ``status`` subresource
(conditions replaced as a whole), only when something but the time
changed.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Mapping

from flotilla.kubernetes.conditions import CONDITION_MESSAGE_LIMIT, now_rfc3339, truncate

#: A member's state as the group's counts see it.
WAITING, BOUND, RUNNING, SUCCEEDED, FAILED = "waiting", "bound", "running", "succeeded", "failed"


def member_state(obj: Mapping) -> str:
    phase = (obj.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return SUCCEEDED
    if phase == "Failed":
        return FAILED
    if phase == "Running":
        return RUNNING
    return BOUND if (obj.get("spec") or {}).get("nodeName") else WAITING


def podgroup_status(min_member: int, states: Mapping[str, str], reason: str | None, stored: bool) -> dict:
    """The status of a group of ``min_member`` whose pods are in ``states`` (uid -> state); ``reason``: why its
    waiting pods wait; ``stored``: the gang is in its queue (not refused, not short of members)."""
    counts = {state: 0 for state in (WAITING, BOUND, RUNNING, SUCCEEDED, FAILED)}
    for state in states.values():
        counts[state] += 1
    placed = counts[BOUND] + counts[RUNNING] + counts[SUCCEEDED]
    present = placed + counts[WAITING]
    status: dict = {"running": counts[RUNNING], "succeeded": counts[SUCCEEDED], "failed": counts[FAILED]}
    if states and not (counts[WAITING] or counts[BOUND] or counts[RUNNING]):
        status["phase"] = "Completed"
        status["conditions"] = []
    elif placed >= min_member:
        status["phase"] = "Running"
        status["conditions"] = [{"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready to be "
                                 "scheduled", "message": f"{placed} of minMember {min_member} pods bound"}]
    else:
        if present < min_member:
            why, phase = "NotEnoughTasks", "Pending"
            message = f"{present} of minMember {min_member} pods exist" + (f"; {reason}" if reason else "")
        else:
            why, phase = ("NotEnoughResources", "Inqueue") if stored else ("Unschedulable", "Pending")
            message = reason or f"{counts[WAITING]} of {present} pods waiting"
        status["phase"] = phase
        status["conditions"] = [{"type": "Unschedulable", "status": "True", "reason": why,
                                 "message": truncate("flotilla: " + message, CONDITION_MESSAGE_LIMIT)}]
    return status


class PodGroupReporter:
    """Writes PodGroup statuses, each only when it changed (bounded memory: the oldest are forgotten)."""

    def __init__(self, client, group_version: str, max_entries: int = 50_000):
        self.client = client
        self.group_version = group_version   # /apis/scheduling.volcano.sh/v1beta1
        self.max_entries = max_entries
        self._written: OrderedDict[tuple[str, str], dict] = OrderedDict()

    def claim(self, key: tuple[str, str], status: dict) -> bool:
        """Whether ``status`` differs from the group's last one; if so it is taken as written from now on (the
        write is under way: a next cycle does not write it again; a failed write forgets it)."""
        if self._written.get(key) == status:
            return False
        self._written[key] = status
        self._written.move_to_end(key)
        while len(self._written) > self.max_entries:
            self._written.popitem(last=False)
        return True

    def write(self, key: tuple[str, str], status: dict) -> bool:
        """Patch the group's status (claimed first); raises what the API said, the claim forgotten."""
        namespace, name = key
        body = {"status": {**status, "conditions": [{**c, "transitionID": "flotilla",
                                                     "lastTransitionTime": now_rfc3339()}
                                                    for c in status.get("conditions") or ()]}}
        try:
            self.client.patch(f"{self.group_version}/namespaces/{namespace}/podgroups/{name}/status", body)
        except Exception:
            self.forget(key)
            raise
        return True

    def forget(self, key: tuple[str, str]) -> None:
        self._written.pop(key, None)


__all__ = ["PodGroupReporter", "member_state", "podgroup_status"]
