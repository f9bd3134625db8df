"""Issue 30, item 4: fair streams. Caps per user on watch streams and followed logs, 429 naming the cap."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from flotilla.service.errors import ApiError
from flotilla.service.logs import PodLogs
from flotilla.service.settings import from_config
from flotilla.service.streams import Slots, StreamLimits
from flotilla.config import parse_config
from tests.support.serve import Server
from tests.support.service import CONFIG
from tests.support.e2e import CONFIG as E2E


def test_the_stream_settings_and_their_defaults():
    assert from_config(parse_config(CONFIG, "t.yaml")).streams == StreamLimits(100, 4, 16, 600.0)
    text = "server: {streams: {watchPerUser: 3, followsPerUser: 1, follows: 2, followIdleTimeout: 30s}}\n" + CONFIG
    assert from_config(parse_config(text, "t.yaml")).streams == StreamLimits(3, 1, 2, 30.0)


class FakeResponse:
    def __init__(self):
        self.ended = threading.Event()

    def shutdown(self):
        self.ended.set()

    def release_conn(self):
        pass


def test_followed_logs_are_capped_per_user_and_in_all(monkeypatch):
    settings = from_config(parse_config(
        "server: {streams: {followsPerUser: 2, follows: 3}}\n" + CONFIG, "t.yaml"))
    logs = PodLogs(settings)
    monkeypatch.setattr(logs, "open", lambda job, pod, follow, tail, container=None: FakeResponse())
    alice = [logs.follow({}, 0, None, "alice") for _ in range(2)]
    with pytest.raises(ApiError) as caught:
        logs.follow({}, 0, None, "alice")
    assert (caught.value.status, caught.value.message) == (
        429, "user 'alice' has 2 followed logs open already, the most one user may "
             "(server.streams.followsPerUser: 2); close one and try again")
    bob = logs.follow({}, 0, None, "bob")
    with pytest.raises(ApiError) as caught:
        logs.follow({}, 0, None, "carol")
    assert (caught.value.status, caught.value.message) == (
        429, "3 followed logs are open already, the most the service keeps (server.streams.follows: 3); "
             "try again later")
    response, release = alice[0]
    release()
    release()   # given back once only
    assert response.ended.is_set()
    assert logs._followers.held("alice") == 1 and logs._followers.held() == 2
    logs.follow({}, 0, None, "carol")
    bob[1]()


def test_a_follow_that_cannot_open_gives_its_slot_back(monkeypatch):
    logs = PodLogs(from_config(parse_config(CONFIG, "t.yaml")))

    def refuse(job, pod, follow, tail, container=None):
        raise ApiError(410, "gone")

    monkeypatch.setattr(logs, "open", refuse)
    for _ in range(10):
        with pytest.raises(ApiError):
            logs.follow({}, 0, None, "alice")
    assert logs._followers.held() == 0


def test_slots_count_per_user():
    slots = Slots("watch streams", 1, "server.streams.watchPerUser")
    give_back = slots.take("a")
    with pytest.raises(ApiError):
        slots.take("a")
    slots.take("b")
    give_back()
    slots.take("a")
    assert (slots.held("a"), slots.held("b"), slots.held()) == (1, 1, 2)


def test_watch_streams_are_capped_per_user_and_others_still_watch(tmp_path):
    srv = Server(tmp_path, E2E.replace('server: {listen: "127.0.0.1:PORT"}',
                                       'server: {listen: "127.0.0.1:PORT", streams: {watchPerUser: 2}}'))
    srv.start(timeout=180)
    try:
        path = "/v1/queues/A/jobsets/w/events"
        timeout = httpx.Timeout(30.0)
        with srv.http("alice") as alice, srv.http("bob") as bob, srv.http("alice") as alice1, \
                srv.http("alice") as alice2:
            first = alice1.send(alice1.build_request("GET", path, params={"follow": "true"}, timeout=timeout),
                                stream=True)
            second = alice2.send(alice2.build_request("GET", path, params={"follow": "true"}, timeout=timeout),
                                 stream=True)
            assert (first.status_code, second.status_code) == (200, 200)
            third = alice.get(path, params={"follow": "true"})
            assert (third.status_code, third.json()["error"]["message"]) == (
                429, "user 'alice' has 2 watch streams open already, the most one user may "
                     "(server.streams.watchPerUser: 2); close one and try again")
            # bob watches his own queue: his own cap, untouched by alice's.
            with bob.stream("GET", "/v1/queues/B/jobsets/w/events", params={"follow": "true"},
                            timeout=timeout) as his:
                assert his.status_code == 200
            first.close()
            again = None
            for _ in range(50):   # the slot is given back once the server sees the connection gone
                again = alice.get(path, params={"follow": "false"})
                if again.status_code == 200:
                    break
                time.sleep(0.1)
            assert again.status_code == 200
            second.close()
    finally:
        srv.kill()
