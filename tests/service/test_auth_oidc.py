"""OIDC bearer tokens: signed in the test with keys made by cryptography, their JWKS served on loopback.

A valid token gets 200 and acts as its ``sub``; expired, wrong audience,
wrong issuer, unknown key (and the other refusals) get 401 with the API's
error body and store nothing; a rotated key works once the JWKS serves it,
and the withdrawn one stops; unknown key ids fetch the JWKS at most once per
``jwksMinRefreshInterval``; the groups claim grants exactly its groups'
queues and ``adminGroups``; static tokens keep working beside OIDC.
"""

from __future__ import annotations

import base64
import hmac
import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import structlog
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from fastapi.testclient import TestClient

from flotilla.config import ConfigError, parse_config
from flotilla.service.api import create_app
from flotilla.service.auth import Authenticator
from flotilla.service.settings import QueueSpec, from_config
from flotilla.service.store import Store
from tests.support.service import CONFIG, headers, job, job_file

ISSUER = "https://idp.example.com/realms/batch"
AUDIENCE = "flotilla"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def uint(number: int) -> str:
    return b64(number.to_bytes((number.bit_length() + 7) // 8, "big"))


class SigningKey:
    """A private key of the test's identity provider, its public JWK, and JWTs signed with it."""

    def __init__(self, kid: str, alg: str = "RS256"):
        self.kid, self.alg = kid, alg
        if alg == "RS256":
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            numbers = self.private.public_key().public_numbers()
            self.jwk = {"kty": "RSA", "kid": kid, "use": "sig", "alg": alg, "n": uint(numbers.n), "e": uint(numbers.e)}
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            numbers = self.private.public_key().public_numbers()
            self.jwk = {"kty": "EC", "kid": kid, "use": "sig", "alg": alg, "crv": "P-256",
                        "x": b64(numbers.x.to_bytes(32, "big")), "y": b64(numbers.y.to_bytes(32, "big"))}

    def sign(self, claims: dict, **header) -> str:
        head = {"alg": self.alg, "typ": "JWT", "kid": self.kid, **header}
        signing_input = f"{b64(json.dumps(head).encode())}.{b64(json.dumps(claims).encode())}".encode()
        if self.alg == "RS256":
            signature = self.private.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(self.private.sign(signing_input, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signing_input.decode()}.{b64(signature)}"


class IdentityProvider:
    """Serves ``/jwks`` on loopback from a thread; ``hits`` counts the fetches."""

    def __init__(self):
        self.keys = [SigningKey("key-1")]
        self.hits = 0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                provider.hits += 1
                body = json.dumps({"keys": [k.jwk for k in provider.keys]}).encode()
                self.send_response(200 if self.path == "/jwks" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def token(self, key: SigningKey | None = None, **claims) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "erin", "groups": [], "iat": now, "exp": now + 300,
                **claims}
        return (key or self.keys[0]).sign({k: v for k, v in body.items() if v is not None})

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Clock:
    """A clock the test moves: monotonic (the JWKS refresh floor and interval) or the wall (token times)."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def oidc_config(url: str, extra: str = "") -> str:
    return CONFIG.replace("  adminGroups: [admins]\n", f"""  adminGroups: [admins, platform-admins]
  oidc:
    issuer: {ISSUER}
    audience: {AUDIENCE}
    jwksUrl: {url}
{extra}""")


@pytest.fixture
def idp():
    provider = IdentityProvider()
    yield provider
    provider.close()


@pytest.fixture
def api(idp, tmp_path):
    """(client, store, authenticator, monotonic clock, wall clock); queues g1q (group g1) and g2q (group g2)."""
    settings = from_config(parse_config(oidc_config(idp.url), "oidc.yaml"))
    store = Store(f"sqlite:///{tmp_path}/oidc.db")
    store.sync_queues(settings.queues)
    store.create_queue(QueueSpec("g1q", group_owners=("g1",)))
    store.create_queue(QueueSpec("g2q", group_owners=("g2",)))
    clock, wall = Clock(1000.0), Clock(time.time())
    auth = Authenticator.from_settings(settings, monotonic=clock, clock=wall)
    yield TestClient(create_app(store, settings, authenticator=auth)), store, auth, clock, wall
    store.close()


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def refused(message: str) -> dict:
    return {"error": {"code": "unauthenticated", "message": message, "field": None, "errors": []}}


def test_a_valid_token_gets_200_and_acts_as_its_subject(api, idp):
    client, store, _, _, _ = api
    token = idp.token(groups=["g1"])
    r = client.get("/v1/queues", headers=bearer(token))
    assert r.status_code == 200
    assert [q["name"] for q in r.json()["queues"]] == ["A", "B", "g1q", "g2q"]
    r = client.post("/v1/submit", json=job_file("g1q", "s", [job("c0")]), headers=bearer(token))
    assert r.status_code == 200
    job_id = r.json()["jobs"][0]["id"]
    assert store.get_job(job_id)["owner"] == "erin"
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(token)).status_code == 200
    assert idp.hits == 1                          # the keys were fetched once, then served from the cache


def test_an_es256_token_verifies_with_an_ec_key(api, idp):
    client, _, _, _, _ = api
    idp.keys.append(SigningKey("ec-1", "ES256"))
    assert client.get("/v1/queues", headers=bearer(idp.token(idp.keys[1]))).status_code == 200


def _when(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def test_refused_tokens_get_401_with_the_reason_and_store_nothing(api, idp):
    client, store, _, _, _ = api
    now = int(time.time())
    stranger = SigningKey("stranger")
    key = idp.keys[0]
    valid = idp.token()
    head, payload, signature = valid.split(".")
    forged_payload = b64(json.dumps({"iss": ISSUER, "aud": AUDIENCE, "sub": "root", "groups": ["admins"],
                                     "exp": now + 300}).encode())
    public_key_as_secret = json.dumps(key.jwk).encode()   # the classic confusion: HMAC keyed with the public key
    hs_input = f"{b64(json.dumps({'alg': 'HS256', 'kid': 'key-1'}).encode())}.{payload}"
    hs256 = f"{hs_input}.{b64(hmac.new(public_key_as_secret, hs_input.encode(), 'sha256').digest())}"
    cases = [
        (idp.token(exp=now - 120), f"bearer token expired at {_when(now - 120)}"),
        (idp.token(aud="someone-else"), "bearer token audience 'someone-else' does not include 'flotilla'"),
        (idp.token(aud=["a", "b"]), "bearer token audience ['a', 'b'] does not include 'flotilla'"),
        (idp.token(iss="https://evil.example.com"),
         "bearer token issuer 'https://evil.example.com' is not 'https://idp.example.com/realms/batch'"),
        (idp.token(stranger), "bearer token is signed by an unknown key (kid 'stranger')"),
        (f"{head}.{forged_payload}.{signature}", "bearer token signature does not verify"),
        (idp.token(key=SigningKey("key-1")), "bearer token signature does not verify"),   # same kid, other key
        (hs256, "bearer token algorithm 'HS256' is not allowed (allowed: RS256, ES256)"),
        (f"{b64(json.dumps({'alg': 'none'}).encode())}.{payload}.", "bearer token algorithm 'none' is not allowed "
                                                                     "(allowed: RS256, ES256)"),
        (idp.token(exp=None), "bearer token has no expiry time (exp)"),
        (idp.token(nbf=now + 600), f"bearer token is not valid before {_when(now + 600)}, in the future"),
        (idp.token(sub=None), "bearer token claim 'sub' is not a user name (1-255 characters)"),
        (idp.token(sub="\ud800"), "bearer token claim 'sub' is not a user name (1-255 characters)"),
        (idp.token(groups="g1"), "bearer token claim 'groups' is not a list of at most 1000 group names"),
        ("a.b.c", "bearer token is not a well-formed JWT"),
        ("not-a-token", "unknown bearer token"),
    ]
    for token, message in cases:
        r = client.get("/v1/queues", headers=bearer(token))
        assert (r.status_code, r.json(), r.headers["www-authenticate"]) == (401, refused(message), "Bearer"), token
        r = client.post("/v1/submit", json=job_file("A", "s", [job("c0")]), headers=bearer(token))
        assert (r.status_code, r.json()) == (401, refused(message)), token
    assert store.job_counts() == {state: 0 for state in store.job_counts()}
    assert client.get("/v1/queues").json() == refused("missing bearer token")


def test_a_rotated_key_works_once_the_jwks_serves_it_and_the_withdrawn_one_stops(api, idp):
    client, _, auth, clock, _ = api
    old_token = idp.token()
    assert client.get("/v1/queues", headers=bearer(old_token)).status_code == 200
    idp.keys = [SigningKey("key-2")]                       # the provider rotates: key-1 withdrawn
    new_token = idp.token()
    clock.now += 30                                        # jwksMinRefreshInterval (30s) since the first fetch
    assert client.get("/v1/queues", headers=bearer(new_token)).status_code == 200
    assert (idp.hits, auth.oidc.keys.key_ids) == (2, ["key-2"])
    r = client.get("/v1/queues", headers=bearer(old_token))
    assert (r.status_code, r.json()) == (401, refused("bearer token is signed by an unknown key (kid 'key-1')"))


def test_unknown_key_ids_fetch_the_jwks_at_most_once_per_floor(api, idp):
    client, _, auth, clock, _ = api
    assert client.get("/v1/queues", headers=bearer(idp.token())).status_code == 200
    strangers = [SigningKey(f"made-up-{i}") for i in range(3)]
    for i in range(30):
        assert client.get("/v1/queues", headers=bearer(idp.token(strangers[i % 3]))).status_code == 401
    assert idp.hits == 1                                   # within the floor: no fetch at all
    clock.now += 29
    assert client.get("/v1/queues", headers=bearer(idp.token(strangers[0]))).status_code == 401
    assert idp.hits == 1
    clock.now += 1
    for i in range(30):
        assert client.get("/v1/queues", headers=bearer(idp.token(strangers[i % 3]))).status_code == 401
    assert idp.hits == 2                                   # one fetch for the first unknown kid past the floor
    assert client.get("/v1/queues", headers=bearer(idp.token())).status_code == 200
    clock.now += 600                                       # jwksRefreshInterval: the keys are old, fetched again
    assert client.get("/v1/queues", headers=bearer(idp.token())).status_code == 200
    assert (idp.hits, auth.oidc.keys.fetches) == (3, 3)


def test_an_unreachable_jwks_refuses_tokens_and_logs_why(idp, tmp_path):
    url = idp.url.replace("/jwks", "/nothing-here")
    settings = from_config(parse_config(oidc_config(url), "oidc.yaml"))
    store = Store(f"sqlite:///{tmp_path}/oidc.db")
    store.sync_queues(settings.queues)
    client = TestClient(create_app(store, settings))
    with structlog.testing.capture_logs() as logs:
        r = client.get("/v1/queues", headers=bearer(idp.token()))
    assert (r.status_code, r.json()) == (401, refused(
        "bearer token cannot be verified: the identity provider's keys could not be fetched (see the server log)"))
    assert [(e["event"], e["error"]) for e in logs if e["event"] == "oidc.jwks_fetch_failed"] == [
        ("oidc.jwks_fetch_failed", f"HTTP 404 from {url}")]
    assert client.get("/v1/queues", headers=headers("alice")).status_code == 200   # static tokens still work
    store.close()


def test_the_groups_claim_grants_exactly_the_queues_of_those_groups(api, idp):
    client, store, _, _, _ = api
    g1 = bearer(idp.token(sub="erin", groups=["g1"]))
    admin = bearer(idp.token(sub="pat", groups=["platform-admins"]))
    r = client.post("/v1/submit", json=job_file("g2q", "s", [job("theirs")]), headers=admin)
    assert r.status_code == 200
    theirs = r.json()["jobs"][0]["id"]

    assert client.post("/v1/submit", json=job_file("g1q", "s", [job("mine")]), headers=g1).status_code == 200
    assert client.get("/v1/queues/g1q/jobsets/s/jobs", headers=g1).status_code == 200
    assert client.get("/v1/queues/g1q/jobsets/s/events?follow=false", headers=g1).status_code == 200
    assert client.post("/v1/cancel", json={"queue": "g1q", "jobSetId": "s"}, headers=g1).status_code == 200

    r = client.post("/v1/submit", json=job_file("g2q", "s", [job("nope")]), headers=g1)
    assert (r.status_code, r.json()["error"]["message"]) == (403, "user 'erin' may not submit to queue 'g2q'")
    r = client.get("/v1/queues/g2q/jobsets/s/jobs", headers=g1)
    assert (r.status_code, r.json()["error"]["message"]) == (403, "user 'erin' may not act in queue 'g2q'")
    r = client.get("/v1/queues/g2q/jobsets/s/events?follow=false", headers=g1)
    assert (r.status_code, r.json()["error"]["message"]) == (403, "user 'erin' may not act in queue 'g2q'")
    r = client.post("/v1/cancel", json={"queue": "g2q", "jobSetId": "s"}, headers=g1)
    assert (r.status_code, r.json()["error"]["message"]) == (403, "user 'erin' may not act in queue 'g2q'")
    r = client.get(f"/v1/jobs/{theirs}", headers=g1)
    assert (r.status_code, r.json()["error"]["message"]) == (404, f"job {theirs!r} not found")
    for queue in ("A", "B"):
        r = client.post("/v1/submit", json=job_file(queue, "s", [job("x")]), headers=g1)
        assert r.status_code == 403
    r = client.post("/v1/queues", json={"name": "new"}, headers=g1)
    assert (r.status_code, r.json()["error"]["message"]) == (403, "user 'erin' is not an administrator")
    assert store.get_job(theirs)["state"] == "queued"           # erin's refused cancel left it alone

    # a member of an adminGroups group does admin operations
    assert client.post("/v1/queues", json={"name": "new", "groupOwners": ["g1"]}, headers=admin).status_code == 200
    assert client.post("/v1/submit", json=job_file("new", "s", [job("a")]), headers=g1).status_code == 200
    assert client.delete("/v1/queues/new?force=true", headers=admin).status_code == 200
    assert client.post("/v1/queues/g2q/cordon", headers=admin).status_code == 200

    # the same group reaches the same queue whether it comes with a static token or an OIDC token
    ml = bearer(idp.token(sub="mona", groups=["ml"]))
    assert client.post("/v1/submit", json=job_file("A", "s", [job("m")]), headers=ml).status_code == 200
    assert client.post("/v1/submit", json=job_file("A", "s", [job("c")]), headers=headers("carol")).status_code == 200
    assert client.post("/v1/submit", json=job_file("B", "s", [job("b")]), headers=headers("bob")).status_code == 200
    assert [j["owner"] for j in client.get("/v1/queues/A/jobsets/s/jobs", headers=ml).json()["jobs"]] == [
        "mona", "carol"]


def test_claims_and_prefixes_are_configurable(idp, tmp_path):
    extra = ("    usernameClaim: preferred_username\n    groupsClaim: roles\n"
             "    usernamePrefix: 'sso:'\n    groupsPrefix: 'sso:'\n")
    settings = from_config(parse_config(oidc_config(idp.url, extra), "oidc.yaml"))
    store = Store(f"sqlite:///{tmp_path}/oidc.db")
    store.sync_queues(settings.queues)
    store.create_queue(QueueSpec("plain", group_owners=("g1",)))
    store.create_queue(QueueSpec("prefixed", group_owners=("sso:g1",)))
    client = TestClient(create_app(store, settings))
    token = bearer(idp.token(sub="0b1f", preferred_username="erin", roles=["g1"], groups=["admins"]))
    r = client.post("/v1/submit", json=job_file("prefixed", "s", [job("a")]), headers=token)
    assert r.status_code == 200
    assert store.get_job(r.json()["jobs"][0]["id"])["owner"] == "sso:erin"
    r = client.post("/v1/submit", json=job_file("plain", "s", [job("a")]), headers=token)
    assert (r.status_code, r.json()["error"]["message"]) == (403, "user 'sso:erin' may not submit to queue 'plain'")
    r = client.post("/v1/queues", json={"name": "x"}, headers=token)   # the 'groups' claim is not read
    assert r.status_code == 403
    store.close()


def test_an_open_stream_ends_when_its_token_expires(api, idp):
    client, _, _, _, wall = api
    exp = int(wall.now) + 60
    token = bearer(idp.token(groups=["g1"], exp=exp))
    assert client.post("/v1/submit", json=job_file("g1q", "w", [job("a")]), headers=token).status_code == 200
    kinds = []
    with client.stream("GET", "/v1/queues/g1q/jobsets/w/events", headers=token) as stream:
        for line in stream.iter_lines():
            if not line.strip():
                continue
            event = json.loads(line)
            kinds.append(event["kind"])
            if len(kinds) == 2:
                wall.now = exp + 30                       # past exp and the 30s leeway
            if event["kind"] == "end":
                break
    assert kinds == ["submitted", "queued", "end"]
    assert event["reason"] == f"the bearer token no longer authenticates (bearer token expired at {_when(exp)})"


@pytest.mark.parametrize("oidc, message", [
    ("{issuer: i, audience: a, jwksUrl: 'https://idp/k', algorithms: [HS256]}",
     "oidc.yaml:3: auth.oidc.algorithms[0]: Input should be 'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', "
     "'ES256', 'ES384' or 'ES512' (got 'HS256')"),
    ("{issuer: i, audience: a, jwksUrl: 'https://idp/k', algorithms: [none]}",
     "oidc.yaml:3: auth.oidc.algorithms[0]: Input should be 'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', "
     "'ES256', 'ES384' or 'ES512' (got 'none')"),
    ("{issuer: i, audience: a, jwksUrl: 'http://idp.example.com/k'}",
     "oidc.yaml:3: auth.oidc.jwksUrl: expected an https:// URL (http:// only to localhost or 127.0.0.1), "
     "got 'http://idp.example.com/k'"),
    ("{issuer: i, audience: a, jwksUrl: 'https://idp/k', jwksMinRefreshInterval: 0s}",
     "oidc.yaml:3: auth.oidc.jwksMinRefreshInterval: Input should be greater than or equal to 1 (got 0.0)"),
    ("{issuer: i, jwksUrl: 'https://idp/k'}", "oidc.yaml:3: auth.oidc.audience: required field missing"),
    ("{issuer: i, audience: a, jwksUrl: 'https://idp/k', groupClaim: g}",
     "oidc.yaml:3: auth.oidc.groupClaim: unknown field 'groupClaim' (did you mean 'groupsClaim'?)"),
])
def test_the_oidc_settings_are_checked_with_file_line_and_field(oidc, message):
    with pytest.raises(ConfigError) as caught:
        parse_config(f"queues: []\nauth:\n  oidc: {oidc}\n", "oidc.yaml")
    assert str(caught.value) == message


def test_a_running_serve_takes_oidc_tokens_beside_static_ones(idp, tmp_path):
    from tests.support.serve import Server, wait_for

    config = oidc_config(idp.url).replace("cycle: {period: 0.2s}", "cycle: {period: 0.2s}\nserver: "
                                          "{listen: 127.0.0.1:PORT}\nstore: {url: 'sqlite:///DB'}")
    srv = Server(tmp_path, config).start()
    try:
        wait_for(lambda: idp.hits == 1)                  # the keys are fetched at start, before any token
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            token = bearer(idp.token(sub="erin", groups=["ml"]))
            r = http.post("/v1/submit", json=job_file("A", "s", [job("x")]), headers=token)
            assert r.status_code == 200
            assert http.get(f"/v1/jobs/{r.json()['jobs'][0]['id']}", headers=token).json()["owner"] == "erin"
            r = http.post("/v1/submit", json=job_file("B", "s", [job("y")]), headers=token)
            assert (r.status_code, r.json()["error"]["message"]) == (403, "user 'erin' may not submit to queue 'B'")
            r = http.post("/v1/submit", json=job_file("A", "s", [job("z")]), headers=bearer(idp.token(aud="x")))
            assert (r.status_code, r.json()) == (401, refused("bearer token audience 'x' does not include 'flotilla'"))
            assert http.get("/v1/queues", headers=headers("bob")).status_code == 200
        assert idp.hits == 1
    finally:
        srv.kill(signal.SIGTERM)
