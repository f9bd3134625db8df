"""OIDC bearer tokens: JWTs signed by an identity provider, verified with the keys it publishes (its JWKS).

A token is accepted when, in this order:

1. it is a compact JWS whose ``alg`` is one of ``auth.oidc.algorithms``
   (public-key algorithms only: the config refuses ``none`` and ``HS*``);
2. its ``kid`` names a key of the provider's JWKS (a token without ``kid``
   is accepted only while the JWKS has exactly one key), and the signature
   verifies with that key;
3. ``iss`` equals ``issuer``; ``aud`` is ``audience`` or a list holding it;
4. ``exp`` is present and not past, ``nbf`` and ``iat`` (when present) are
   not in the future, each within ``leeway``;
5. the username claim is a valid name, and the groups claim (when present)
   a list of at most :data:`MAX_GROUPS` valid names.

The keys are fetched with httpx, at the first token, again once they are
``jwksRefreshInterval`` old (so a key the provider withdrew stops working),
and again when a token names a key id the cache does not hold (a rotation).
No two fetches are closer than ``jwksMinRefreshInterval``, whatever the
tokens say, so a stream of made-up key ids costs the provider one request
per interval. A failed fetch keeps the keys already held.
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any, Callable

import httpx
import structlog
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import JWKRegistry, Key

from flotilla.service.auth.identity import Identity, Unauthenticated
from flotilla.service.settings import OidcSettings

log = structlog.get_logger("flotilla.service.auth")

#: Largest JWKS document read (bytes), and most keys taken from it.
MAX_JWKS_BYTES = 1024 * 1024
MAX_JWKS_KEYS = 100
#: Most groups one token may carry; a user name or group name is at most MAX_NAME characters.
MAX_GROUPS = 1000
MAX_NAME = 255
#: Key types a signature algorithm of :data:`flotilla.config.models.OIDC_ALGORITHMS` can use.
SIGNING_KEY_TYPES = ("RSA", "EC")


class JwksError(Exception):
    """The JWKS could not be fetched or read (the message says what happened)."""


def _show(value: Any) -> str:
    """A value from a token, quoted and cut short for a message (the token is the caller's, not trusted)."""
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _when(seconds: float) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    except (OverflowError, OSError, ValueError):
        return repr(seconds)


def valid_name(name: Any) -> bool:
    """A user or group name the store and the pages can hold: 1-255 characters of Unicode, no control characters."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:   # a lone surrogate, which JSON's \ud800 escape can carry
        return False
    return not any(ord(c) < 32 or ord(c) == 127 for c in name)


def parse_jwks(document: Any) -> dict[str, Key]:
    """The signing keys of a JWKS document, by key id; unusable entries are logged and left out."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError('expected a JSON object with a "keys" list')
    entries = document["keys"]
    if len(entries) > MAX_JWKS_KEYS:
        raise JwksError(f"{len(entries)} keys; at most {MAX_JWKS_KEYS} are read")
    keys: dict[str, Key] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            log.warning("oidc.jwks_key_skipped", index=index, reason="not an object")
            continue
        kty, use = entry.get("kty"), entry.get("use")
        if kty not in SIGNING_KEY_TYPES or use not in (None, "sig"):
            log.warning("oidc.jwks_key_skipped", index=index, kid=_show(entry.get("kid")),
                        reason=f"kty {_show(kty)}, use {_show(use)}: not a public signing key")
            continue
        public = {name: value for name, value in entry.items() if name not in ("d", "p", "q", "dp", "dq", "qi")}
        try:
            key = JWKRegistry.import_key(public)
            key.ensure_kid()
        except (JoseError, ValueError, TypeError) as exc:
            log.warning("oidc.jwks_key_skipped", index=index, kid=_show(entry.get("kid")), reason=str(exc)[:200])
            continue
        if key.kid in keys:
            log.warning("oidc.jwks_key_skipped", index=index, kid=_show(key.kid), reason="duplicate kid")
            continue
        keys[key.kid] = key
    if not keys:
        raise JwksError("no usable signing key (RSA or EC, use sig)")
    return keys


class KeyCache:
    """The provider's signing keys, fetched from ``url`` when first needed, when old, and on an unknown kid."""

    def __init__(self, url: str, *, timeout: float, refresh_interval: float, min_refresh_interval: float,
                 monotonic: Callable[[], float] = time.monotonic):
        self.url = url
        self.timeout = timeout
        self.refresh_interval = refresh_interval
        self.min_refresh_interval = min_refresh_interval
        self._monotonic = monotonic
        self._keys: dict[str, Key] = {}
        self._loaded_at: float | None = None
        self._attempted_at: float | None = None
        self._lock = threading.Lock()
        #: Fetches attempted, and the last one's error (None after a success).
        self.fetches = 0
        self.last_error: str | None = None

    def same_source(self, settings: OidcSettings) -> bool:
        """Whether this cache serves ``settings`` as it is (a reload that keeps the JWKS keeps its keys)."""
        return (self.url, self.timeout, self.refresh_interval, self.min_refresh_interval) == (
            settings.jwks_url, settings.jwks_timeout, settings.jwks_refresh_interval,
            settings.jwks_min_refresh_interval)

    @property
    def key_ids(self) -> list[str]:
        return sorted(self._keys)

    def key(self, kid: str | None) -> Key:
        """The key a token with this ``kid`` is verified with; :class:`Unauthenticated` when there is none."""
        if self._due(kid, self._monotonic()):
            with self._lock:
                if self._due(kid, self._monotonic()):   # not fetched by another thread meanwhile
                    self.refresh()
        keys = self._keys
        if not keys:
            raise Unauthenticated("bearer token cannot be verified: the identity provider's keys could not be "
                                  "fetched (see the server log)")
        if kid is None:
            if len(keys) == 1:
                return next(iter(keys.values()))
            raise Unauthenticated(f"bearer token names no key id (kid) and the identity provider has {len(keys)} keys")
        key = keys.get(kid)
        if key is None:
            raise Unauthenticated(f"bearer token is signed by an unknown key (kid {_show(kid)})")
        return key

    def _due(self, kid: str | None, now: float) -> bool:
        if self._attempted_at is not None and now - self._attempted_at < self.min_refresh_interval:
            return False   # the floor, whatever the token asks for
        if self._loaded_at is None or now - self._loaded_at >= self.refresh_interval:
            return True
        return kid not in self._keys if kid is not None else len(self._keys) != 1

    def prefetch(self) -> None:
        """Fetch the keys unless a fetch was already tried (at start and after a reload, from a thread)."""
        with self._lock:
            if self._attempted_at is None:
                self.refresh()

    def refresh(self) -> bool:
        """Fetch the JWKS now; on failure the keys held stay. True when the keys were replaced."""
        self._attempted_at = self._monotonic()
        self.fetches += 1
        try:
            keys = parse_jwks(self._download())
        except JwksError as exc:
            self.last_error = str(exc)
            log.error("oidc.jwks_fetch_failed", url=self.url, error=str(exc), kept=sorted(self._keys))
            return False
        self._keys = keys
        self._loaded_at = self._attempted_at
        self.last_error = None
        log.info("oidc.jwks_fetched", url=self.url, kids=sorted(keys))
        return True

    def _download(self) -> Any:
        try:
            with httpx.Client(timeout=self.timeout, follow_redirects=False) as client:
                with client.stream("GET", self.url, headers={"Accept": "application/json"}) as response:
                    if response.status_code != 200:
                        raise JwksError(f"HTTP {response.status_code} from {self.url}")
                    body = bytearray()
                    for chunk in response.iter_bytes():
                        body += chunk
                        if len(body) > MAX_JWKS_BYTES:
                            raise JwksError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
        except httpx.HTTPError as exc:
            raise JwksError(f"{type(exc).__name__}: {exc}") from None
        try:
            return json.loads(bytes(body))
        except (ValueError, RecursionError):
            raise JwksError("the JWKS is not JSON") from None


class OidcVerifier:
    """Verifies OIDC tokens against ``settings`` and maps their claims to an :class:`Identity`."""

    def __init__(self, settings: OidcSettings, admin_groups: frozenset[str], *,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 keys: KeyCache | None = None):
        self.settings = settings
        self.admin_groups = admin_groups
        self._clock = clock
        self.keys = keys or KeyCache(settings.jwks_url, timeout=settings.jwks_timeout,
                                     refresh_interval=settings.jwks_refresh_interval,
                                     min_refresh_interval=settings.jwks_min_refresh_interval, monotonic=monotonic)

    def verify(self, token: str) -> Identity:
        """The identity a valid token names; :class:`Unauthenticated` saying why otherwise."""
        s = self.settings
        try:
            signed = jws.extract_compact(token.encode("ascii"))
            header = signed.headers()
        except (JoseError, ValueError, TypeError, RecursionError, UnicodeError):
            raise Unauthenticated("bearer token is not a well-formed JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in s.algorithms:
            raise Unauthenticated(f"bearer token algorithm {_show(alg)} is not allowed "
                                  f"(allowed: {', '.join(s.algorithms)})")
        if kid is not None and not isinstance(kid, str):
            raise Unauthenticated("bearer token is not a well-formed JWT: kid is not a string")
        key = self.keys.key(kid)
        try:
            good = jws.validate_compact(signed, key, algorithms=[alg])
        except (JoseError, ValueError, TypeError):
            good = False
        if not good:
            raise Unauthenticated("bearer token signature does not verify")
        try:
            claims = json.loads(signed.payload)
        except (ValueError, RecursionError, TypeError):
            claims = None
        if not isinstance(claims, dict):
            raise Unauthenticated("bearer token is not a well-formed JWT: its claims are not a JSON object")
        expires = self._check_claims(claims)
        return self._identity(claims, expires)

    def _check_claims(self, claims: dict) -> float:
        s, now = self.settings, self._clock()
        if claims.get("iss") != s.issuer:
            raise Unauthenticated(f"bearer token issuer {_show(claims.get('iss'))} is not {s.issuer!r}")
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if s.audience not in audiences:
            raise Unauthenticated(f"bearer token audience {_show(aud)} does not include {s.audience!r}")
        exp = claims.get("exp")
        if not _number(exp):
            raise Unauthenticated("bearer token has no expiry time (exp)")
        if now >= exp + s.leeway:
            raise Unauthenticated(f"bearer token expired at {_when(exp)}")
        for name, what in (("nbf", "is not valid before"), ("iat", "was issued at")):
            value = claims.get(name)
            if value is None:
                continue
            if not _number(value):
                raise Unauthenticated(f"bearer token claim {name!r} is not a time")
            if value > now + s.leeway:
                raise Unauthenticated(f"bearer token {what} {_when(value)}, in the future")
        return float(exp)

    def _identity(self, claims: dict, expires: float) -> Identity:
        s = self.settings
        name = claims.get(s.username_claim)
        user = s.username_prefix + name if isinstance(name, str) and name else None
        if not valid_name(user):
            raise Unauthenticated(f"bearer token claim {s.username_claim!r} is not a user name "
                                  f"(1-{MAX_NAME} characters)")
        raw = claims.get(s.groups_claim, [])
        if not isinstance(raw, list) or len(raw) > MAX_GROUPS or not all(isinstance(g, str) and g for g in raw):
            raise Unauthenticated(f"bearer token claim {s.groups_claim!r} is not a list of at most {MAX_GROUPS} "
                                  f"group names")
        groups = frozenset(s.groups_prefix + g for g in raw)
        if not all(valid_name(g) for g in groups):
            raise Unauthenticated(f"bearer token claim {s.groups_claim!r} holds a group name that is not "
                                  f"1-{MAX_NAME} characters of text")
        return Identity(user, groups, bool(groups & self.admin_groups), expires)
