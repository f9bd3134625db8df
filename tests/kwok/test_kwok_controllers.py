"""The test clusters' kube-controller-manager and CRDs: real batch/v1 Jobs make their pods, a Job's
podFailurePolicy sees a preemption's DisruptionTarget, deleting a Job deletes its pods, and Volcano's
PodGroup is served as deploy/crds/ defines it."""

from __future__ import annotations

import time

import pytest

from flotilla.kubernetes.client import ApiError, pod_path
from flotilla.kubernetes.conditions import PodReporter

pytestmark = pytest.mark.kwok

JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODGROUPS = "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups"
#: kube-controller-manager's pod-failure backoff for a Job's first failed pod (DefaultJobPodFailureBackOff).
POD_FAILURE_BACKOFF = 10.0


def job(name: str, parallelism: int, **spec) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0, **spec,
                     "template": {"metadata": {"labels": {"flotilla.io/queue": "a"}},
                                  "spec": {"schedulerName": "flotilla", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                                           "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                           "resources": {"requests": {"cpu": "1"}}}]}}}}


def job_pods(cluster, name: str) -> list[dict]:
    return [p for p in cluster.pods() if (p["metadata"].get("labels") or {}).get("job-name") == name]


def bind(cluster, pod: dict, node: str) -> None:
    meta = pod["metadata"]
    cluster.client.post(pod_path(meta["namespace"], meta["name"]) + "/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"], "uid": meta["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


def wait_for(predicate, timeout: float = 60.0, what: str = "condition", seen=None):
    """``predicate()``'s first true value; on timeout an AssertionError naming ``what`` and, with ``seen``,
    what ``seen()`` reports of the cluster then."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (saw(seen) if seen else ""))
        time.sleep(0.1)


def saw(seen) -> str:
    """``seen()``'s report for a timeout message; a failure to read it is reported, never raised over the timeout."""
    try:
        return f"; saw:\n{seen()}"
    except Exception as exc:  # noqa: BLE001 - the timeout is the failure to report
        return f"; what the cluster showed could not be read: {exc!r}"


def job_state(cluster, name: str) -> str:
    """What a timeout waiting on Job ``name`` needs to be diagnosed: the Job's status, its pods (uid, nodeName,
    phase, deletion, finalizers, conditions, when containers finished), the events on the Job (the Job
    controller's SuccessfulCreate, FailedCreate, ...) and what kube-controller-manager logged about it."""
    from flotilla.kwok.cluster import workdir

    lines = []
    try:
        job_obj = cluster.client.get(f"{JOBS}/{name}")
        lines.append(f"job {name} uid={job_obj['metadata']['uid']} status={job_obj.get('status')}")
    except ApiError as exc:
        lines.append(f"job {name}: {exc}")
    for pod in job_pods(cluster, name):
        meta, status = pod["metadata"], pod["status"]
        finished = [s["state"]["terminated"].get("finishedAt") for s in status.get("containerStatuses") or ()
                    if "terminated" in s.get("state", {})]
        lines.append(f"pod {meta['name']} uid={meta['uid']} created={meta.get('creationTimestamp')} "
                     f"nodeName={pod['spec'].get('nodeName')} phase={status.get('phase')} finished={finished} "
                     f"deletion={meta.get('deletionTimestamp')} finalizers={meta.get('finalizers')} "
                     f"conditions={[(c['type'], c['status'], c.get('reason')) for c in status.get('conditions', ())]}")
    events = cluster.client.get("/api/v1/namespaces/default/events",
                                fieldSelector=f"involvedObject.kind=Job,involvedObject.name={name}")["items"]
    lines += [f"event {e.get('lastTimestamp') or e.get('eventTime')} {e['type']} {e['reason']} x{e.get('count', 1)}: "
              f"{e.get('message')}" for e in events]
    log = workdir(cluster.name) / "logs" / "kube-controller-manager.log"
    if log.exists():
        # At its default verbosity the controller-manager names a Job in few lines; sync errors name none.
        about = [line for line in log.read_text(errors="replace").splitlines()
                 if f"default/{name}" in line or f'"{name}"' in line or "syncing job" in line]
        lines.append(f"{log}, lines on Job {name} and Job sync errors (the last 40 of {len(about)}):")
        lines += about[-40:]
    lines += controller_metrics(cluster)
    return "\n".join(lines)


def controller_metrics(cluster) -> list[str]:
    """kube-controller-manager's job_controller_* metrics (syncs by result and action, syncs skipped for a stale
    cache, pods created), read from its /metrics (open without credentials on the KWOK clusters)."""
    import ssl
    import urllib.request

    import yaml

    from flotilla.kwok.cluster import workdir

    components = [c for doc in yaml.safe_load_all((workdir(cluster.name) / "kwok.yaml").read_text())
                  if isinstance(doc, dict) and doc.get("kind") == "KwokctlConfiguration"
                  for c in doc.get("components") or ()]
    ports = [arg.split("=", 1)[1] for c in components if c.get("name") == "kube-controller-manager"
             for arg in c.get("args") or () if arg.startswith("--secure-port=")]
    if not ports:
        return ["kube-controller-manager's port not found"]
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{ports[0]}/metrics", timeout=5,
                                    context=ssl._create_unverified_context()) as response:
            text = response.read().decode()
    except OSError as exc:
        return [f"kube-controller-manager metrics: {exc}"]
    return [line for line in text.splitlines() if line.startswith("job_controller_") and "_bucket{" not in line]


def running(cluster, name: str, count: int) -> list[dict]:
    return wait_for(lambda: (lambda ps: ps if len(ps) == count and all(
        p["status"].get("phase") == "Running" for p in ps) else None)(job_pods(cluster, name)),
        what=f"{count} running pods of job {name}", seen=lambda: job_state(cluster, name))


def test_the_job_controller_makes_a_jobs_pods_and_they_wait_for_flotilla(kwok):
    cluster = kwok["a"]
    created = cluster.client.post(JOBS, job("train", 3))
    pods = wait_for(lambda: (lambda ps: ps if len(ps) == 3 else None)(job_pods(cluster, "train")),
                    what="the job's 3 pods", seen=lambda: job_state(cluster, "train"))
    assert {(p["spec"]["schedulerName"], p["spec"].get("nodeName"), p["status"]["phase"],
             p["metadata"]["labels"]["flotilla.io/queue"]) for p in pods} == {("flotilla", None, "Pending", "a")}
    assert [[(o["kind"], o["name"], o["uid"], o.get("controller")) for o in p["metadata"]["ownerReferences"]]
            for p in pods] == [[("Job", "train", created["metadata"]["uid"], True)]] * 3
    for pod in pods:
        bind(cluster, pod, "node-1")
    running(cluster, "train", 3)


def test_a_pod_failure_policy_ignores_a_preempted_pod_and_the_job_replaces_it(kwok):
    cluster = kwok["a"]
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    cluster.client.post(JOBS, job("tolerant", 2, podFailurePolicy=policy))
    cluster.client.post(JOBS, job("fragile", 1, podFailurePolicy=policy))
    for name in ("tolerant", "fragile"):
        pods = wait_for(lambda: (lambda ps: ps if len(ps) == (2 if name == "tolerant" else 1) else None)(
            job_pods(cluster, name)), what=f"pods of {name}", seen=lambda: job_state(cluster, name))
        for pod in pods:
            bind(cluster, pod, "node-1")
    victim = running(cluster, "tolerant", 2)[0]
    [broken] = running(cluster, "fragile", 1)

    reporter = PodReporter(cluster.client)
    meta = victim["metadata"]
    # The victim's last state before it goes, read from a watch started now: once the Job controller has seen it
    # fail it takes its finalizer off and the pod is removed at once, faster than a poll may catch it Failed.
    import threading

    seen_failed: list[dict] = []
    stop = threading.Event()
    rv = cluster.client.get(pod_path("default", meta["name"]))["metadata"]["resourceVersion"]

    def watch_victim() -> None:
        try:
            for event in cluster.client.watch("/api/v1/namespaces/default/pods", rv, 90, stop,
                                              fieldSelector=f"metadata.name={meta['name']}"):
                obj = event.get("object") or {}
                if event["type"] in ("MODIFIED", "DELETED") and (obj.get("status") or {}).get("phase") == "Failed":
                    seen_failed.append(obj)
                    return
        except Exception:   # noqa: BLE001 - the wait below reports what was (not) seen
            pass

    watcher = threading.Thread(target=watch_victim, daemon=True)
    watcher.start()
    reporter.disruption_target(meta["namespace"], meta["name"], meta["uid"], "flotilla: preempted")
    cluster.client.delete(pod_path("default", meta["name"]), {"gracePeriodSeconds": 1})
    # The other Job's pod is deleted without the condition: an ordinary failure.
    cluster.client.delete(pod_path("default", broken["metadata"]["name"]), {"gracePeriodSeconds": 1})

    # The victim ends as a kubelet ends it (Failed, containers killed) and keeps the condition it was given.
    def ended(pod_name):
        try:
            pod = cluster.client.get(pod_path("default", pod_name))
        except ApiError as exc:
            assert exc.status == 404
            return None
        return pod if pod["status"].get("phase") == "Failed" else None
    try:
        final = wait_for(lambda: seen_failed[0] if seen_failed else None, what="the victim to fail",
                         seen=lambda: job_state(cluster, "tolerant"))
    finally:
        stop.set()
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in final["status"]["conditions"]}
    assert conditions["DisruptionTarget"] == ("True", "PreemptionByScheduler")
    assert [s["state"]["terminated"]["exitCode"] for s in final["status"]["containerStatuses"]] == [137]
    finished_at = [s["state"]["terminated"].get("finishedAt") for s in final["status"]["containerStatuses"]]

    # Ignored: no failure counted, a replacement pod made; the Job is still going. The Job controller makes the
    # replacement only once its pod-failure backoff has passed, counted from when the victim's containers
    # finished: an ignored failure is not counted against backoffLimit but still enters that backoff (10 s for
    # the Job's first failure, doubling with each further one).
    replacement = wait_for(lambda: [p for p in job_pods(cluster, "tolerant") if not p["spec"].get("nodeName")],
                           timeout=POD_FAILURE_BACKOFF + 60.0, what="the replacement pod",
                           seen=lambda: f"victim {meta['name']} uid={meta['uid']} finished at {finished_at}\n"
                                        + job_state(cluster, "tolerant"))
    assert len(replacement) == 1 and replacement[0]["status"]["phase"] == "Pending"
    tolerant = wait_for(lambda: (lambda j: j if j["status"].get("active") == 2 else None)(
        cluster.client.get(f"{JOBS}/tolerant")), what="the job's 2 active pods",
        seen=lambda: job_state(cluster, "tolerant"))
    assert (tolerant["status"].get("failed", 0), tolerant["status"].get("conditions")) == (0, None)
    # Counted: with backoffLimit 0 the other Job fails.
    fragile = wait_for(lambda: (lambda j: j if any(c["type"] == "Failed" for c in j["status"].get(
        "conditions") or ()) else None)(cluster.client.get(f"{JOBS}/fragile")), what="the fragile job to fail",
        seen=lambda: job_state(cluster, "fragile"))
    assert (fragile["status"]["failed"], [c["reason"] for c in fragile["status"]["conditions"]
                                          if c["type"] == "Failed"]) == (1, ["BackoffLimitExceeded"])
    # Both pods are gone for good once the Job controller has counted them (its finalizer off).
    wait_for(lambda: ended(meta["name"]) is None and ended(broken["metadata"]["name"]) is None,
             what="the ended pods removed",
             seen=lambda: job_state(cluster, "tolerant") + "\n" + job_state(cluster, "fragile"))


def test_deleting_a_job_deletes_its_pods(kwok):
    cluster = kwok["a"]
    cluster.client.post(JOBS, job("short", 4))
    pods = wait_for(lambda: (lambda ps: ps if len(ps) == 4 else None)(job_pods(cluster, "short")), what="pods",
                    seen=lambda: job_state(cluster, "short"))
    bind(cluster, pods[0], "node-2")
    running_one = wait_for(lambda: [p for p in job_pods(cluster, "short") if p["status"]["phase"] == "Running"],
                           what="one pod running", seen=lambda: job_state(cluster, "short"))
    assert len(running_one) == 1
    cluster.client.delete(f"{JOBS}/short", {"propagationPolicy": "Background"})
    wait_for(lambda: not job_pods(cluster, "short"), what="the job's pods deleted",
             seen=lambda: job_state(cluster, "short"))


def test_volcano_podgroups_are_served_as_deploy_crds_defines_them(kwok):
    cluster = kwok["a"]
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "gang", "namespace": "default"},
             "spec": {"minMember": 3, "minResources": {"cpu": "3", "memory": "6Gi"}, "queue": "research",
                      "priorityClassName": "high", "minTaskMember": {"worker": 2},
                      "preemptable": True, "networkTopology": {"mode": "soft"}}}
    created = cluster.client.post(PODGROUPS, group)
    # Nothing pruned: every field Volcano accepts is stored, so Flotilla sees what it is given.
    assert created["spec"] == {**group["spec"], "networkTopology": {"mode": "soft", "highestTierAllowed": 1}}
    plain = cluster.client.post(PODGROUPS, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                                            "metadata": {"name": "plain"}, "spec": {"minMember": 2}})
    assert plain["spec"] == {"minMember": 2}   # no queue made up

    with pytest.raises(ApiError) as info:
        cluster.client.post(PODGROUPS, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                                        "metadata": {"name": "bad"}, "spec": {"minMember": -1}})
    assert info.value.status == 422
    assert "spec.minMember: Invalid value: -1: spec.minMember in body should be greater than or equal to 0" \
        in str(info.value)

    # Status is a subresource: written through /status, untouched by writes of the object.
    cluster.client.patch(f"{PODGROUPS}/gang/status", {"status": {"phase": "Inqueue", "running": 0}})
    cluster.client.patch(f"{PODGROUPS}/gang", {"status": {"phase": "Running"}, "spec": {"minMember": 4}})
    stored = cluster.client.get(f"{PODGROUPS}/gang")
    assert (stored["spec"]["minMember"], stored["status"]) == (4, {"phase": "Inqueue", "running": 0})
