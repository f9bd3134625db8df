"""Who a request acts as, and what that lets it do (Armada's rules).

* a queue's ``owners`` (users) and ``groupOwners`` (groups) may submit,
  cancel, reprioritize, see jobs and watch job sets in it;
* members of an ``auth.adminGroups`` group may do anything, including
  creating, updating and deleting queues;
* every authenticated user may list and describe queues.

The groups are the same whether they come with a static token
(``auth.tokens[].groups``) or in an OIDC token's groups claim, so a queue
owned by group ``ml`` is open to the ``ml`` members of both.
"""

from __future__ import annotations

from dataclasses import dataclass

from flotilla.service.settings import QueueSpec


@dataclass(frozen=True, slots=True)
class Identity:
    user: str
    groups: frozenset[str]
    admin: bool = False
    #: When the credential stops being valid (Unix seconds, its ``exp``); None for a static token.
    expires: float | None = None


def may_act(identity: Identity, queue: QueueSpec) -> bool:
    """Submit, cancel, reprioritize, read jobs and watch job sets in ``queue``."""
    return identity.admin or identity.user in queue.owners or bool(identity.groups & set(queue.group_owners))


def may_admin(identity: Identity) -> bool:
    """Create, update and delete queues; the test-only cluster controls."""
    return identity.admin


class Unauthenticated(Exception):
    """A credential that does not authenticate; the message says why, in one line, and is sent to the caller.

    The message names what was wrong with the token (expired, wrong
    audience, unknown key), never a configured secret.
    """
