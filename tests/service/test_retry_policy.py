"""Retry policies: rules on exit codes and failure causes decide whether a failed run runs again.

The service loop runs in-process on a fake clock with simulated clusters, whose
jobs fail with the exit code in ``flotilla.io/simulated-exit-code``; the
Kubernetes backend's reading of a failed pod is checked on pod objects as the
API server returns them (KWOK runs the same through ``serve`` in
tests/kwok/test_kwok_failures.py). Every bad rule is refused with its path: in the
config file, through the queue API, in a job file.
"""

from __future__ import annotations

import pytest

from flotilla.config import parse_config
from flotilla.config.errors import ConfigError
from flotilla.kubernetes.pods import failure_details
from flotilla.scheduler import Scheduler
from flotilla.service.jobspec import prepare
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.retry import Failure, compile_policy, decide
from flotilla.service.settings import from_config
from flotilla.service.store import Store, SubmissionRejected, rebuild_states
from tests.support.service import CONFIG, api_env, headers, job, job_file  # noqa: F401 (api_env: the env fixture)

QUEUE_A = "  - {name: A, weight: 1, owners: [alice], groupOwners: [ml]}\n"
EXIT_42 = "[{exitCodes: [42], action: retry, limit: 2}]"


def config_with(policy: str | None = None, extra: str = ""):
    """The service fixtures' config, queue A with retry policy ``policy`` (YAML), one cluster of one node."""
    text = CONFIG
    if policy is not None:
        text = text.replace(QUEUE_A, QUEUE_A[:-2] + f", retryPolicy: {policy}}}\n")
    return parse_config(text + extra, "test.yaml")


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(tmp_path, cfg):
    settings = from_config(cfg)
    clock = Clock()
    store = Store(f"sqlite:///{tmp_path}/retry.db")
    store.sync_queues(settings.queues)
    loop = ServiceLoop(store, settings, Scheduler(cfg), service_backends(cfg, clock=clock), clock=clock, seed=0)
    return settings, store, loop, clock


def failing(exit_code=None, duration="2s", retry_policy=None, **pod) -> dict:
    out = job(duration=duration, **pod)
    if exit_code is not None:
        out["annotations"]["flotilla.io/simulated-exit-code"] = str(exit_code)
    if retry_policy is not None:
        out["retryPolicy"] = retry_policy
    return out


def run_to_end(tmp_path, cfg, item, step=1.0, cycles=200):
    """Submit ``item`` to queue A, cycle until it is finished; its events as (kind, reason) and the store."""
    settings, store, loop, clock = make(tmp_path, cfg)
    _, new = prepare(job_file("A", "s", [item]), settings)
    [job_id] = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]
    for _ in range(cycles):
        loop.run_cycle()
        if store.get_job(job_id)["state"] in ("succeeded", "failed", "cancelled", "preempted"):
            break
        clock.now += step
    events = [(e["kind"], e["reason"]) for e in store.events("A", "s") if e["jobId"] == job_id]
    assert rebuild_states(store.all_events()) == store.job_states()
    return store, job_id, events


RUN = [("leased", ""), ("pending", ""), ("running", "")]


def test_exit_42_retry_limit_2_gives_exactly_three_runs_then_failed(tmp_path):
    store, job_id, events = run_to_end(tmp_path, config_with(EXIT_42), failing(42))
    rule = "queue retryPolicy rule 1 (exit 42: retry, limit 2)"
    assert [(k, r) for k, r in events if k != "leased"] == [
        ("submitted", "by alice"), ("queued", ""),
        ("pending", ""), ("running", ""), ("run-failed", "exited 42"), ("queued", f"{rule}: retry 1 of 2"),
        ("pending", ""), ("running", ""), ("run-failed", "exited 42"), ("queued", f"{rule}: retry 2 of 2"),
        ("pending", ""), ("running", ""), ("failed", f"exited 42; {rule}: gave up after 2 retries"),
    ]
    assert sum(k == "leased" for k, _ in events) == 3
    record = store.get_job(job_id)
    assert (record["state"], record["retries"], record["reason"]) == \
        ("failed", 2, f"exited 42; {rule}: gave up after 2 retries")
    store.close()


def test_without_a_policy_an_exit_fails_the_job_at_once_as_before(tmp_path):
    store, job_id, events = run_to_end(tmp_path, config_with(None), failing(42))
    assert events == [("submitted", "by alice"), ("queued", ""), *RUN, ("failed", "exited 42")]
    assert store.get_job(job_id)["retries"] == 0
    store.close()


def test_an_exit_no_rule_matches_falls_back_to_the_default(tmp_path):
    store, _, events = run_to_end(tmp_path, config_with("[{exitCodes: [42, '100-110'], action: retry, limit: 2}]"),
                                  failing(3))
    assert events == [("submitted", "by alice"), ("queued", ""), *RUN, ("failed", "exited 3")]
    store.close()


def test_a_range_matches_and_the_first_matching_rule_wins(tmp_path):
    policy = "[{exitCodes: ['1-9'], action: fail}, {exitCodes: ['5-50'], action: retry, limit: 1}]"
    store, _, events = run_to_end(tmp_path, config_with(policy), failing(7))
    assert events[-1] == ("failed", "exited 7; queue retryPolicy rule 1 (exit 1-9: fail)")
    assert sum(k == "running" for k, _ in events) == 1
    store.close()
    store, _, events = run_to_end(tmp_path / "second", config_with(policy), failing(12))
    assert [k for k, _ in events].count("running") == 2
    assert events[-1] == ("failed", "exited 12; queue retryPolicy rule 2 (exit 5-50: retry, limit 1): "
                                    "gave up after 1 retries")
    store.close()


def test_a_jobs_own_rules_come_before_its_queues(tmp_path):
    store, _, events = run_to_end(tmp_path, config_with(EXIT_42),
                                  failing(42, retry_policy=[{"exitCodes": [42], "action": "fail"}]))
    assert events == [("submitted", "by alice"), ("queued", ""), *RUN,
                      ("failed", "exited 42; job retryPolicy rule 1 (exit 42: fail)")]
    store.close()
    # A job rule that does not match leaves the queue's rules to decide.
    store, _, events = run_to_end(tmp_path / "second", config_with(EXIT_42),
                                  failing(42, retry_policy=[{"exitCodes": [1], "action": "fail"}]))
    assert [k for k, _ in events].count("running") == 3
    store.close()


def test_a_job_policy_retries_in_a_queue_without_one(tmp_path):
    store, job_id, events = run_to_end(
        tmp_path, config_with(None), failing(42, retry_policy=[{"exitCodes": [42], "action": "retry", "limit": 1}]))
    rule = "job retryPolicy rule 1 (exit 42: retry, limit 1)"
    assert [(k, r) for k, r in events if k in ("run-failed", "queued", "failed")] == [
        ("queued", ""), ("run-failed", "exited 42"), ("queued", f"{rule}: retry 1 of 1"),
        ("failed", f"exited 42; {rule}: gave up after 1 retries")]
    assert store.job_spec(job_id)["retryPolicy"] == [{"exitCodes": [42], "action": "retry", "limit": 1}]
    store.close()


def test_a_deadline_rule_retries_a_job_past_its_active_deadline(tmp_path):
    policy = "[{reasons: [DeadlineExceeded], action: retry, limit: 1}]"
    store, job_id, events = run_to_end(tmp_path, config_with(policy), failing(None, duration=None,
                                                                               activeDeadlineSeconds=3))
    rule = "queue retryPolicy rule 1 (DeadlineExceeded: retry, limit 1)"
    assert [(k, r) for k, r in events if k in ("run-failed", "queued", "failed")] == [
        ("queued", ""), ("run-failed", "active deadline exceeded"), ("queued", f"{rule}: retry 1 of 1"),
        ("failed", f"active deadline exceeded; {rule}: gave up after 1 retries")]
    assert [k for k, _ in events].count("running") == 2
    store.close()


def test_a_lease_expiry_rule_fails_the_job_instead_of_retrying_it(tmp_path):
    settings, store, loop, clock = make(tmp_path, config_with("[{reasons: [LeaseExpired], action: fail}]"))
    _, new = prepare(job_file("A", "s", [failing(None, duration="1h")]), settings)
    [job_id] = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]
    while store.get_job(job_id)["state"] != "running":
        loop.run_cycle()
        clock.now += 1
    loop.backends[store.get_job(job_id)["cluster"]].available = False
    while store.get_job(job_id)["state"] == "running":
        clock.now += 1
        loop.run_cycle()
    events = [(e["kind"], e["reason"]) for e in store.events("A", "s")]
    assert events[-2][0] == "lease-expired" and events[-2][1].startswith("lease on cluster ")
    assert events[-1] == ("failed", f"{events[-2][1]}; queue retryPolicy rule 1 (LeaseExpired: fail)")
    store.close()


# -- the decision, on the failures clusters report --------------------------------------------------

def test_defaults_retry_the_platforms_failures_and_fail_the_jobs_own():
    assert decide((), Failure(True, cause="Evicted"), 3).retry is True
    assert decide((), Failure(False, 42), 3).retry is False
    rules = compile_policy([{"reasons": ["OOMKilled", "Evicted"], "action": "retry", "limit": 4},
                            {"exitCodes": [137], "action": "fail"}], "queue")
    oom = decide(rules, Failure(False, 137, "OOMKilled"), 3)
    assert (oom.retry, oom.limit, oom.rule) == (True, 4, "queue retryPolicy rule 1 (OOMKilled, Evicted: retry, limit 4)")
    killed = decide(rules, Failure(False, 137), 3)
    assert (killed.retry, killed.rule) == (False, "queue retryPolicy rule 2 (exit 137: fail)")


def pod(reason=None, containers=(), init=()) -> dict:
    status = {"phase": "Failed"}
    if reason:
        status["reason"] = reason
    status["containerStatuses"] = [{"name": n, "state": {"terminated": {"exitCode": c, "reason": r}}}
                                   for n, c, r in containers]
    if init:
        status["initContainerStatuses"] = [{"name": n, "state": {"terminated": {"exitCode": c, "reason": r}}}
                                           for n, c, r in init]
    return {"status": status}


def test_a_failed_pod_gives_its_exit_code_and_cause():
    assert failure_details(pod(containers=[("a", 0, "Completed"), ("b", 42, "Error")])) == (42, "")
    assert failure_details(pod(containers=[("a", 137, "OOMKilled")])) == (137, "OOMKilled")
    assert failure_details(pod(init=[("setup", 3, "Error")], containers=[("a", 1, "Error")])) == (3, "")
    # The kubelet's own failures: its cause, and no exit code (the containers were killed for it).
    assert failure_details(pod("Evicted", [("a", 137, "Error")])) == (None, "Evicted")
    assert failure_details(pod("DeadlineExceeded", [("a", 143, "Error")])) == (None, "DeadlineExceeded")
    assert failure_details(pod("NodeShutdown")) == (None, "NodeLost")
    assert failure_details(pod("UnexpectedAdmissionError")) == (None, "")


# -- refusals, with their paths ------------------------------------------------------------------------

BAD_RULES = [
    ("{reasons: [OOMkiled], action: fail}", "retryPolicy[0].reasons[0]",
     "unknown reason 'OOMkiled' (known: OOMKilled, DeadlineExceeded, Evicted, NodeLost, Stuck, LeaseExpired); "
     "did you mean 'OOMKilled'?"),
    ("{exitCodes: [256], action: fail}", "retryPolicy[0].exitCodes[0]",
     "exit code 256 is out of range: exit codes are 0-255"),
    ("{exitCodes: ['3-300'], action: fail}", "retryPolicy[0].exitCodes[0]",
     "expected an exit code (0-255) or a range of them such as \"1-9\", got '3-300'"),
    ("{exitCodes: [-1], action: fail}", "retryPolicy[0].exitCodes[0]",
     "exit code -1 is out of range: exit codes are 0-255"),
    ("{exitCodes: [1], action: retry, limit: -1}", "retryPolicy[0].limit", "Input should be greater than or equal to 0"),
    ("{exitCodes: [1], action: retry, limit: 101}", "retryPolicy[0].limit",
     "Input should be less than or equal to 100"),
    ("{exitCodes: [1], action: retry}", "retryPolicy[0]", "a retry rule needs a limit (the retries it allows, 0-100)"),
    ("{exitCodes: [1], reasons: [Evicted], action: fail}", "retryPolicy[0]", "give exactly one of exitCodes or reasons"),
    ("{exitCodes: [1], action: again}", "retryPolicy[0].action", "Input should be 'retry' or 'fail'"),
]


@pytest.mark.parametrize("rule,path,message", BAD_RULES)
def test_a_bad_rule_in_the_config_is_refused_with_its_path_and_line(rule, path, message):
    with pytest.raises(ConfigError) as caught:
        config_with(f"[{{exitCodes: [2], action: fail}}, {rule}]")
    # The rule is the second of queue A's policy, the first queue: line 7 of the file.
    shifted = path.replace("retryPolicy[0]", "retryPolicy[1]")
    assert (caught.value.path, caught.value.line) == (f"queues[0].{shifted}", 7)
    # The config's errors also quote a plain value that its type refused.
    got = {"retryPolicy[0].limit": " (got " + rule.split("limit: ")[-1].rstrip("}") + ")",
           "retryPolicy[0].action": " (got 'again')"}.get(path, "")
    assert caught.value.message.removeprefix("Value error, ") == message + got


@pytest.mark.parametrize("rule,path,message", BAD_RULES)
def test_a_bad_rule_through_the_queue_api_is_refused_with_its_path(env, rule, path, message):
    import yaml

    client, store = env
    answer = client.post("/v1/queues", json={"name": "R", "retryPolicy": [yaml.safe_load(rule)]},
                         headers=headers("root"))
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["field"] == path
    assert error["errors"][0]["message"].removeprefix("Value error, ") == message
    assert store.get_queue("R") is None


@pytest.mark.parametrize("rule,path,message", BAD_RULES)
def test_a_bad_rule_in_a_job_file_is_refused_with_its_path(rule, path, message):
    import yaml

    settings = from_config(config_with(None))
    item = failing(42, retry_policy=[yaml.safe_load(rule)])
    with pytest.raises(SubmissionRejected) as caught:
        prepare(job_file("A", "s", [job("ok"), item]), settings)
    [rejection] = caught.value.rejections
    assert (rejection.index, rejection.field) == (1, path)
    assert rejection.message.removeprefix("Value error, ") == message


def test_a_queue_policy_through_the_api_is_kept_and_shown(env):
    client, store = env
    policy = [{"exitCodes": [42, "1-9"], "action": "retry", "limit": 2}, {"reasons": ["Evicted"], "action": "fail"}]
    answer = client.post("/v1/queues", json={"name": "R", "owners": ["alice"], "retryPolicy": policy},
                         headers=headers("root"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["retryPolicy"] == policy
    assert client.get("/v1/queues/R", headers=headers("alice")).json()["retryPolicy"] == policy
    assert store.get_queue("R").retry_policy == tuple(policy)
    updated = client.put("/v1/queues/R", json={"owners": ["alice"]}, headers=headers("root"))
    assert updated.json()["retryPolicy"] == [] and store.get_queue("R").retry_policy == ()


def test_a_bad_simulated_exit_code_is_refused_with_its_path():
    settings = from_config(config_with(None))
    for text in ("0", "256", "x"):
        with pytest.raises(SubmissionRejected) as caught:
            prepare(job_file("A", "s", [failing(text)]), settings)
        [rejection] = caught.value.rejections
        assert (rejection.field, rejection.message) == (
            "annotations.flotilla.io/simulated-exit-code",
            f"expected an exit code 1-255 in ASCII digits (a run that succeeds has none), got {text!r}")


def test_exit_codes_read_back_as_meant():
    from flotilla.config.models import RetryRuleConfig

    rule = RetryRuleConfig.model_validate({"exitCodes": [42, "9-1", "3", 7.0, "0", "255-255"], "action": "fail"})
    assert rule.exit_codes == [42, "1-9", 3, 7, 0, 255]
    assert rule.describe() == "exit 42,1-9,3,7,0,255: fail"
