"""Jobs as pods and back, nodes, Stage documents and node templates: no cluster needed."""

from __future__ import annotations

import pytest
import yaml

from flotilla.core.model import Gang, Job, JobState, Toleration
from flotilla.kubernetes.pods import (PodSettings, job_from_pod, label_value, node_from_object, pod_manifest,
                                      pod_name, pod_requests)
from flotilla.kubernetes.protobuf import Unsupported, _fields, decode_status, encode_pod
from flotilla.kwok.cluster import STAGES_DIR, load_node_template, render_node

JOB = Job("Job_42", "research", "sweep-1", priority=7, priority_class="armada-preemptible", submitted=12.5,
          requests={"cpu": 1500, "memory": 2 * 2**30, "nvidia.com/gpu": 1}, node_selector={"pool": "gpu"},
          tolerations=(Toleration("gpu", "Equal", "yes", "NoSchedule"),), gang=Gang("g-1", 2),
          annotations={"team": "vision"})


def test_manifest_carries_labels_grace_deadline_and_kwok_delay():
    pod = pod_manifest(JOB, "node-7", 3, PodSettings(namespace="ml", grace_default=1.0), duration=90)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == pod_name("flotilla-", "Job_42", 3) and meta["namespace"] == "ml"
    assert meta["name"].endswith("-3") and meta["name"] == meta["name"].lower()
    assert meta["labels"] == {"flotilla.io/job-id": "Job_42", "flotilla.io/queue": "research",
                              "flotilla.io/job-set": "sweep-1", "flotilla.io/priority-class": "armada-preemptible"}
    assert meta["annotations"]["pod-complete.stage.kwok.x-k8s.io/delay"] == "90000ms"
    assert meta["annotations"]["armadaproject.io/gangCardinality"] == "2"
    assert spec["nodeName"] == "node-7" and spec["priorityClassName"] == "armada-preemptible"
    assert spec["terminationGracePeriodSeconds"] == 1            # gracePeriod.default, as the settings name it
    assert spec["activeDeadlineSeconds"] == 14 * 86400           # a GPU job: deadlines.gpu
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": "1"},
                                                  "limits": {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": "1"}}
    cpu_only = pod_manifest(Job("c", "q", requests={"cpu": 1000}), None, 0, PodSettings())
    assert cpu_only["spec"]["activeDeadlineSeconds"] == 3 * 86400 and "nodeName" not in cpu_only["spec"]
    assert cpu_only["spec"]["terminationGracePeriodSeconds"] == 30   # no gracePeriod.default: Kubernetes' 30 s
    named = pod_manifest(Job("g", "q", requests={"cpu": 1000}, annotations={"flotilla.io/grace-period": "7"}), None, 0,
                         PodSettings())
    assert named["spec"]["terminationGracePeriodSeconds"] == 7      # the job's own grace period wins


def test_pod_reads_back_as_the_same_running_job():
    pod = pod_manifest(JOB, "node-7", 0, PodSettings())
    pod["status"] = {"phase": "Running"}
    job = job_from_pod(pod, "c1")
    assert (job.id, job.queue, job.job_set, job.priority, job.priority_class, job.submitted) == \
        ("Job_42", "research", "sweep-1", 7, "armada-preemptible", 12.5)
    assert dict(job.requests) == dict(JOB.requests) and job.gang == JOB.gang
    assert job.tolerations == JOB.tolerations and dict(job.node_selector) == {"pool": "gpu"}
    assert (job.state, job.cluster, job.node) == (JobState.RUNNING, "c1", "node-7")
    assert job.annotations == {"team": "vision"}


def test_label_values_are_always_valid():
    assert label_value("A") == "A"
    long = label_value("x" * 100)
    assert len(long) <= 63
    odd = label_value("queue with spaces/and:colons")
    assert len(odd) <= 63 and " " not in odd and "/" not in odd


def test_requests_count_init_containers_and_overhead_like_kube_scheduler():
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                                   {"resources": {"requests": {"cpu": "500m"}}}],
                    "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
                    "overhead": {"cpu": "100m"}}}
    assert pod_requests(pod) == {"cpu": 4100, "memory": 2**30}
    assert pod_requests({"spec": {"containers": [{"resources": {"requests": {"memory": "1.5"}}}]}}) == {"memory": 2}


def test_cordoned_nodes_are_unschedulable_not_ready_ones_tainted_as_kubernetes_does():
    obj = {"metadata": {"name": "n1", "labels": {"zone": "a"}},
           "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"},
                               {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                               {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}]},
           "status": {"allocatable": {"cpu": "31500m", "memory": "128Gi", "pods": "110"},
                      "conditions": [{"type": "Ready", "status": "True"}]}}
    node = node_from_object(obj, "c1")
    assert dict(node.resources) == {"cpu": 31500, "memory": 128 * 2**30, "pods": 110} and not node.unschedulable
    assert [t.key for t in node.taints] == ["gpu", "node.kubernetes.io/not-ready", "node.kubernetes.io/disk-pressure"]
    obj["spec"]["taints"] = obj["spec"]["taints"][:1]
    obj["status"]["conditions"][0]["status"] = "False"
    not_ready = node_from_object(obj, "c1")   # no lifecycle controller has tainted it: tainted as it would be
    assert not not_ready.unschedulable and [(t.key, t.effect) for t in not_ready.taints] == \
        [("gpu", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoSchedule")]
    obj["status"]["conditions"][0]["status"] = "True"
    obj["spec"]["unschedulable"] = True
    assert node_from_object(obj, "c1").unschedulable


def test_protobuf_pod_envelope():
    pod = pod_manifest(JOB, "node-7", 0, PodSettings(grace_default=1.0))
    data = encode_pod(pod)
    assert data.startswith(b"k8s\x00")
    envelope = dict(_fields(data[4:]))
    type_meta = dict(_fields(envelope[1]))
    assert type_meta == {1: b"v1", 2: b"Pod"}
    body = dict(_fields(envelope[2]))
    meta = list(_fields(body[1]))
    assert (1, pod["metadata"]["name"].encode()) in meta
    spec = list(_fields(body[2]))
    assert (10, b"node-7") in spec and (19, b"flotilla") in spec and (4, 1) in spec
    pod["spec"]["hostNetwork"] = True
    try:
        encode_pod(pod)
    except Unsupported as exc:
        assert "hostNetwork" in str(exc)
    else:
        raise AssertionError("unknown field encoded")


def test_protobuf_status_decodes_reason():
    def s(field, text):
        raw = text.encode()
        return bytes([(field << 3) | 2, len(raw)]) + raw
    status = s(2, "Failure") + s(3, 'pods "x" already exists') + s(4, "AlreadyExists") + bytes([6 << 3, 0x99, 0x03])
    envelope = b"k8s\x00" + bytes([(2 << 3) | 2, len(status)]) + status
    assert decode_status(envelope) == {"kind": "Status", "status": "Failure", "message": 'pods "x" already exists',
                                       "reason": "AlreadyExists", "code": 409}


def test_stages_cover_ready_complete_deadline_delete_without_jitter():
    stages = {}
    for path in sorted(STAGES_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] == "Stage":
                stages[doc["metadata"]["name"]] = doc["spec"]
    assert set(stages) == {"flotilla-node-initialize", "flotilla-node-not-ready", "flotilla-pod-ready",
                           "flotilla-pod-complete", "flotilla-pod-deadline", "flotilla-pod-delete", "flotilla-pod-exit",
                           "flotilla-pod-image-pull-error", "flotilla-pod-terminate"}
    for name, spec in stages.items():
        delay = spec.get("delay") or {}
        assert "jitterDurationMilliseconds" not in delay and "jitterDurationFrom" not in delay, name
    assert stages["flotilla-pod-complete"]["delay"]["durationFrom"]["expressionFrom"] == \
        '.metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]'
    assert stages["flotilla-pod-delete"]["delay"]["durationFrom"]["expressionFrom"] == ".metadata.deletionTimestamp"
    assert stages["flotilla-pod-complete"]["next"]["statusTemplate"].strip().endswith("phase: Succeeded")
    # A deleted pod held by finalizers (a Job controller's) ends at its deletion time, as a kubelet ends it.
    assert stages["flotilla-pod-terminate"]["delay"]["durationFrom"]["expressionFrom"] == ".metadata.deletionTimestamp"


def test_node_template_short_form_and_manifest(tmp_path):
    short = tmp_path / "short.yaml"
    short.write_text("namePrefix: gpu\nresources: {cpu: 64, nvidia.com/gpu: 8}\nlabels: {pool: gpu}\n"
                     "taints: [{key: gpu, value: 'yes'}]\n")
    node = render_node(load_node_template(short), 3)
    assert node["metadata"]["name"] == "gpu-3"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["metadata"]["labels"]["pool"] == "gpu"
    assert node["status"]["allocatable"] == {"cpu": "64", "nvidia.com/gpu": "8", "pods": "110"}
    assert node["spec"]["taints"] == [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    manifest = tmp_path / "node.yaml"
    manifest.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: 'big-{index}-x'}\n"
                        "status: {allocatable: {cpu: '96'}, capacity: {cpu: '96'}}\n")
    node = render_node(load_node_template(manifest), 12)
    assert node["metadata"]["name"] == "big-12-x" and node["status"]["allocatable"] == {"cpu": "96"}
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"


def test_kubernetes_cluster_settings_from_the_config_reach_the_backend():
    from kubernetes.client import Configuration

    from flotilla.config.loader import parse_config
    from flotilla.kubernetes.backend import backend_from_config
    from flotilla.kubernetes.client import KubeClient

    cfg = parse_config("""
clusters:
  - {name: a, kind: kubernetes, context: a, namespace: batch}
  - {name: b, kind: kubernetes, context: b, workers: 4, bind: binding, nodeSelector: "pool=batch",
     finishedPodRetention: 10m}
  - {name: c, kind: kubernetes, context: c, finishedPodRetention: 0s}
""", "k8s.yaml")
    configuration = Configuration()
    configuration.host = "http://127.0.0.1:9"  # never contacted: start=False
    a, b, c = (backend_from_config(x, cfg, client=KubeClient(configuration), start=False) for x in cfg.clusters)
    assert (a.bind, a._pool._max_workers, a.node_selector, a.settings.namespace) == ("node-name", 32, None, "batch")
    assert (b.bind, b._pool._max_workers, b.node_selector, b.settings.namespace) == ("binding", 4, "pool=batch",
                                                                                      "default")
    # An hour by default, so that a finished job's log can be read; 0s deletes finished pods at once.
    assert (a.finished_pod_retention, b.finished_pod_retention, c.finished_pod_retention) == (3600.0, 600.0, 0.0)


def test_in_cluster_true_uses_the_pods_service_account_through_the_official_loader(tmp_path, monkeypatch):
    from kubernetes.config import incluster_config

    from flotilla.config.loader import parse_config
    from flotilla.kubernetes.backend import backend_from_config

    (tmp_path / "token").write_text("the-pods-token")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = parse_config("clusters:\n  - {name: here, kind: kubernetes, inCluster: true, stuckPodExpiry: 90s, "
                       "nodeLostTimeout: 2m, ingressDomain: jobs.example.com}\n", "k8s.yaml")
    backend = backend_from_config(cfg.clusters[0], cfg, start=False)
    assert backend.client.host == "https://10.96.0.1:443"
    assert backend.client.configuration.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert backend.client._headers()["authorization"] == "bearer the-pods-token"
    assert (backend.stuck_pod_expiry, backend.node_lost_timeout, backend.settings.ingress_domain) == \
        (90.0, 120.0, "jobs.example.com")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(incluster_config.ConfigException, match="Service host/port is not set"):
        backend_from_config(cfg.clusters[0], cfg, start=False)
