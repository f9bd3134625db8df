"""Bearer tokens and per-queue permissions (Armada's rules).

* a token in the config (``auth.tokens``, given as ``token`` or as its
  ``sha256`` hex digest) maps to a user and groups;
* a queue's ``owners`` (users) and ``groupOwners`` (groups) may submit,
  cancel, reprioritize, see jobs and watch job sets in it;
* members of an ``auth.adminGroups`` group may do anything, including
  creating, updating and deleting queues;
* every authenticated user may list and describe queues.

Tokens are compared by their SHA-256 digest in constant time, so the
configured plaintext tokens and hashes are treated alike.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Iterable

from flotilla.service.settings import QueueSpec, TokenSpec


@dataclass(frozen=True, slots=True)
class Identity:
    user: str
    groups: frozenset[str]
    admin: bool = False


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Authenticator:
    def __init__(self, tokens: Iterable[TokenSpec], admin_groups: Iterable[str] = ()):
        self.admin_groups = frozenset(admin_groups)
        self._by_digest: list[tuple[bytes, Identity]] = []
        for spec in tokens:
            digest = sha256_hex(spec.token) if spec.token is not None else (spec.sha256 or "").strip().lower()
            if not digest:
                continue
            groups = frozenset(spec.groups)
            self._by_digest.append((digest.encode(), Identity(spec.user, groups, bool(groups & self.admin_groups))))

    def authenticate(self, authorization: str | None) -> Identity | None:
        """The identity behind an ``Authorization: Bearer TOKEN`` header, or None."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = sha256_hex(token.strip()).encode()
        found = None
        for candidate, identity in self._by_digest:   # no early exit: constant time over the table
            if hmac.compare_digest(candidate, digest):
                found = identity
        return found


def may_act(identity: Identity, queue: QueueSpec) -> bool:
    """Submit, cancel, reprioritize, read jobs and watch job sets in ``queue``."""
    return identity.admin or identity.user in queue.owners or bool(identity.groups & set(queue.group_owners))


def may_admin(identity: Identity) -> bool:
    """Create, update and delete queues; the test-only cluster controls."""
    return identity.admin
