"""What authenticating one request costs: a static token, an RS256 and an ES256 OIDC token.

Builds an :class:`Authenticator` with ``--tokens`` static tokens and OIDC
settings whose JWKS a loopback server serves (the test's identity provider,
``tests/service/test_auth_oidc.py``), then times ``--repeat`` verifications of each
kind of token, the OIDC ones carrying ``--groups`` groups. The keys are
fetched once before timing, as a running server holds them. A benchmark,
not a test: it asserts nothing.

    python bench/auth.py [--tokens 100] [--groups 50] [--repeat 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()

    from flotilla.service.auth import Authenticator
    from flotilla.service.settings import OidcSettings, TokenSpec
    from test_auth_oidc import AUDIENCE, ISSUER, IdentityProvider, SigningKey

    idp = IdentityProvider()
    idp.keys.append(SigningKey("ec-1", "ES256"))
    auth = Authenticator([TokenSpec(f"user-{i}", token=f"token-{i}") for i in range(args.tokens)], ["admins"],
                         OidcSettings(ISSUER, AUDIENCE, idp.url))
    groups = [f"group-{i}" for i in range(args.groups)]
    cases = [(f"static token (table of {args.tokens})", f"token-{args.tokens // 2}"),
             (f"OIDC RS256, {args.groups} groups", idp.token(groups=groups)),
             (f"OIDC ES256, {args.groups} groups", idp.token(idp.keys[1], groups=groups))]
    try:
        for name, token in cases:
            header = f"Bearer {token}"
            auth.verify(header)
            started = time.perf_counter()
            for _ in range(args.repeat):
                auth.verify(header)
            print(f"{name:<32} {(time.perf_counter() - started) / args.repeat * 1e6:7.0f} us per request")
        print(f"JWKS fetches: {idp.hits}")
    finally:
        idp.close()


if __name__ == "__main__":
    main()
