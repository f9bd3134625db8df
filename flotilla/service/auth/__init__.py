"""Bearer tokens: static ones from the config and OIDC tokens from an identity provider, side by side.

* :mod:`.static` - ``auth.tokens``: a token (or its SHA-256) maps to a user and groups;
* :mod:`.oidc` - ``auth.oidc``: a JWT signed by the provider's keys; the user and groups come from its claims;
* :mod:`.identity` - what an identity may do (queue owners and groupOwners, ``auth.adminGroups``).

A token that is one of ``auth.tokens`` is that token's user; any other token
that looks like a JWT is verified as an OIDC token when ``auth.oidc`` is set.
:meth:`Authenticator.configure` replaces both at once (a config reload): the
next request is judged by the new settings, and :attr:`Authenticator.generation`
tells open streams to judge their credential again.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import structlog

from flotilla.service.auth.identity import Identity, Unauthenticated, may_act, may_admin
from flotilla.service.auth.oidc import KeyCache, OidcVerifier
from flotilla.service.auth.static import StaticTokens, sha256_hex
from flotilla.service.settings import OidcSettings, ServiceSettings, TokenSpec

log = structlog.get_logger("flotilla.service.auth")

#: The longest bearer token read; a provider's token with many groups stays well under it.
MAX_TOKEN_LENGTH = 16 * 1024
#: Static tokens compared on the event loop (each a SHA-256 comparison); a larger table is compared in a thread.
QUICK_TABLE = 256


@dataclass(frozen=True, slots=True)
class _Rules:
    """Everything one request is judged by, swapped whole so a request never sees half a reload."""

    static: StaticTokens
    oidc: OidcVerifier | None


class Authenticator:
    """Turns an ``Authorization`` header into an :class:`Identity` under the current auth settings."""

    def __init__(self, tokens: Iterable[TokenSpec] = (), admin_groups: Iterable[str] = (),
                 oidc: OidcSettings | None = None, *, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._monotonic = monotonic
        self._rules: _Rules | None = None
        self._lock = threading.Lock()
        #: Counts :meth:`configure` calls; a stream that saw another value judges its credential again.
        self.generation = 0
        self.configure(tokens, admin_groups, oidc)

    @classmethod
    def from_settings(cls, settings: ServiceSettings, **kwargs) -> Authenticator:
        return cls(settings.tokens, settings.admin_groups, settings.oidc, **kwargs)

    def configure(self, tokens: Iterable[TokenSpec], admin_groups: Iterable[str], oidc: OidcSettings | None) -> None:
        """Judge every later request by these settings; the JWKS cache is kept when its source is unchanged."""
        admins = frozenset(admin_groups)
        with self._lock:
            old = self._rules.oidc if self._rules is not None else None
            verifier = None
            if oidc is not None:
                keys: KeyCache | None = old.keys if old is not None and old.keys.same_source(oidc) else None
                verifier = OidcVerifier(oidc, admins, clock=self._clock, monotonic=self._monotonic, keys=keys)
            self._rules = _Rules(StaticTokens(tokens, admins), verifier)
            self.generation += 1

    def apply(self, settings: ServiceSettings) -> None:
        self.configure(settings.tokens, settings.admin_groups, settings.oidc)

    def now(self) -> float:
        """The clock tokens' expiry is judged by (Unix seconds)."""
        return self._clock()

    @property
    def oidc(self) -> OidcVerifier | None:
        return self._rules.oidc

    def warm(self) -> None:
        """Fetch the OIDC keys now (at start and after a reload), so a wrong ``jwksUrl`` is logged at once."""
        verifier = self._rules.oidc
        if verifier is not None and verifier.keys.fetches == 0:
            threading.Thread(target=verifier.keys.prefetch, name="flotilla-jwks", daemon=True).start()

    def verify(self, authorization: str | None) -> Identity:
        """The identity behind ``Authorization: Bearer TOKEN``; :class:`Unauthenticated` saying why not.

        May fetch the OIDC keys (bounded by ``jwksTimeout``): call it off the event loop.
        """
        if not authorization:
            raise Unauthenticated("missing bearer token")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("missing bearer token (expected the header Authorization: Bearer TOKEN)")
        if len(token) > MAX_TOKEN_LENGTH:
            raise Unauthenticated(f"bearer token longer than {MAX_TOKEN_LENGTH} characters")
        rules = self._rules
        found = rules.static.lookup(token)
        if found is not None:
            return found
        if rules.oidc is not None and token.count(".") == 2:
            return rules.oidc.verify(token)
        raise Unauthenticated("unknown bearer token")

    def verify_quickly(self, authorization: str | None) -> Identity | None:
        """:meth:`verify` where it is quick (a static token of a table of at most :data:`QUICK_TABLE`, a
        malformed header), on the event loop; None for a token to judge in a thread (an OIDC token, whose keys
        may be fetched, or a large table, compared whole in constant time)."""
        if not authorization:
            raise Unauthenticated("missing bearer token")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        rules = self._rules
        if len(rules.static) > QUICK_TABLE:
            return None
        if scheme.lower() == "bearer" and token and len(token) <= MAX_TOKEN_LENGTH:
            found = rules.static.lookup(token)
            if found is not None:
                return found
            if rules.oidc is not None and token.count(".") == 2:
                return None
        return self.verify(authorization)   # refused without any fetch: the same words as verify's

    def authenticate(self, authorization: str | None) -> Identity | None:
        """:meth:`verify`, with None for a credential that does not authenticate."""
        try:
            return self.verify(authorization)
        except Unauthenticated:
            return None


__all__ = ["Authenticator", "Identity", "Unauthenticated", "may_act", "may_admin", "sha256_hex",
           "MAX_TOKEN_LENGTH"]
