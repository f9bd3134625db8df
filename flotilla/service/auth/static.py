"""Static bearer tokens (``auth.tokens``): each maps to a user and groups.

A token is given in the config as ``token`` or as its ``sha256`` hex digest;
both are compared by their SHA-256 digest in constant time over the whole
table, so the configured plaintext tokens and hashes are treated alike and
the time taken says nothing about which token came close.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Iterable

from flotilla.service.auth.identity import Identity
from flotilla.service.settings import TokenSpec


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class StaticTokens:
    """The table of ``auth.tokens``, by digest."""

    def __init__(self, tokens: Iterable[TokenSpec], admin_groups: frozenset[str]):
        self._by_digest: list[tuple[bytes, Identity]] = []
        for spec in tokens:
            digest = sha256_hex(spec.token) if spec.token is not None else (spec.sha256 or "").strip().lower()
            if not digest:
                continue
            groups = frozenset(spec.groups)
            self._by_digest.append((digest.encode(), Identity(spec.user, groups, bool(groups & admin_groups))))

    def __len__(self) -> int:
        return len(self._by_digest)

    def lookup(self, token: str) -> Identity | None:
        """The identity of ``token``, or None when no configured token is it."""
        digest = sha256_hex(token).encode()
        found = None
        for candidate, identity in self._by_digest:   # no early exit: constant time over the table
            if hmac.compare_digest(candidate, digest):
                found = identity
        return found
