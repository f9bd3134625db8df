"""Services and DNS on the real node, as on a cluster of one's own: kube-proxy routes ClusterIPs, CoreDNS names them.

The node is ``real-1`` (tests/support/realnode.py) with kube-proxy (iptables
mode) and CoreDNS beside its kubelet (flotilla/kwok/realnode/network.py).
Every pod here is bound to the node by name and runs the local busybox image
in the test's own namespace; what a pod found is read from its log.
"""

from __future__ import annotations

import http.client
import json
import ssl

import pytest
from tests.support.realnode_jobs import bare_pod

from flotilla.kubernetes.client import ApiError, pod_path

pytestmark = pytest.mark.realnode

API_NAME = "kubernetes.default.svc.cluster.local"
#: What Go's TLS server answers a plain HTTP request with (as the pod's log shows it, lines without their CR).
NOT_TLS = "HTTP/1.0 400 Bad Request\n\nClient sent an HTTP request to an HTTPS server."


def run_pod(real_node, name: str, command: str, timeout: float = 90.0, **spec) -> tuple[str, str]:
    """Create a bare pod on real-1 running ``command``; wait until it ends; its phase and log."""
    manifest = bare_pod(name, command, real_node.image, **spec)
    real_node.client.post(pod_path(real_node.namespace), manifest)
    pod = real_node.wait(lambda: (lambda p: p if p["status"].get("phase") in ("Succeeded", "Failed") else None)(
        real_node.client.get(pod_path(real_node.namespace, name))), timeout=timeout, what=f"pod {name} to end")
    answer = real_node.client.pod_log(real_node.namespace, name)
    try:
        log = answer.read().decode()
    finally:
        answer.release_conn()
    return pod["status"]["phase"], log


def run_steps(real_node, name: str, steps: dict[str, str]) -> dict[str, str]:
    """Run each of ``steps`` (title -> shell command) in turn in one bare pod on real-1, which must succeed; what
    each printed, by title."""
    command = "; ".join(f"echo '== {title}'; {step}" for title, step in steps.items())
    phase, log = run_pod(real_node, name, command)
    assert phase == "Succeeded", log
    return sections(log)


def sections(log: str) -> dict[str, str]:
    """The log's parts, each after a line ``== NAME``."""
    out: dict[str, list[str]] = {}
    current = None
    for line in log.splitlines():
        if line.startswith("== "):
            current = line[3:]
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return {key: "\n".join(lines) for key, lines in out.items()}


def addresses(nslookup: str) -> list[str]:
    """The addresses busybox's nslookup printed for the name asked (after its ``Name:`` line)."""
    found, seen_name = [], False
    for line in nslookup.splitlines():
        if line.startswith("Name:"):
            seen_name = True
        elif seen_name and line.startswith("Address:"):
            found.append(line.split()[-1])
    return found


def node_ip(real_node) -> str:
    node = real_node.client.get(f"/api/v1/nodes/{real_node.node}")
    return next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service_by_name(real_node):
    service = real_node.client.get("/api/v1/namespaces/default/services/kubernetes")
    assert service["spec"]["clusterIP"] == "10.0.0.1"
    [slice_] = real_node.client.get("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
                                    labelSelector="kubernetes.io/service-name=kubernetes")["items"]
    # The API server's advertise address is the node IP (which pods reach), not 127.0.0.1.
    assert [e["addresses"] for e in slice_["endpoints"]] == [[node_ip(real_node)]]
    # busybox's own TLS cannot shake hands with the API server (handshake failure, alert 40: it offers none of
    # the suites Go's server takes), so the pod speaks plain HTTP to the HTTPS port: the answer is Go's TLS
    # server's own. The test below verifies the certificate and reads /version through the ClusterIP.
    ask = "printf 'GET /version HTTP/1.0\\r\\n\\r\\n' | nc {} 443"
    parts = run_steps(real_node, "asker", {
        "resolv": "cat /etc/resolv.conf", "lookup": f"nslookup -type=A {API_NAME}", "by name": ask.format(API_NAME),
        "by short name": ask.format("kubernetes.default"), "by ip": ask.format("10.0.0.1")})
    ns = real_node.namespace
    # The kubelet's resolv.conf for a ClusterFirst pod: the cluster's search path, CoreDNS, ndots 5.
    assert parts["resolv"].splitlines() == [f"search {ns}.svc.cluster.local svc.cluster.local cluster.local",
                                            f"nameserver {node_ip(real_node)}", "options ndots:5"]
    assert addresses(parts["lookup"]) == ["10.0.0.1"], parts["lookup"]
    for how in ("by name", "by short name", "by ip"):
        assert parts[how] == NOT_TLS, (how, parts[how])


def test_the_api_server_is_verified_at_the_kubernetes_services_cluster_ip(real_node):
    """A client in a pod verifies the API server at the ClusterIP (in-cluster config) or by the Service's names:
    its certificate names them; and from this machine (kube-proxy's rules DNAT its own traffic too) a verified
    TLS connection to 10.0.0.1:443 reads the API server's /version."""
    from flotilla.kwok.cluster import workdir
    from flotilla.kwok.realnode import CLUSTER

    pki = workdir(CLUSTER) / "pki"
    cert = ssl._ssl._test_decode_cert(str(pki / "admin.crt"))
    names = {value for _, value in cert["subjectAltName"]}
    assert {"10.0.0.1", API_NAME, "kubernetes.default.svc", "kubernetes.default", "kubernetes",
            node_ip(real_node)} <= names
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    connection = http.client.HTTPSConnection("10.0.0.1", 443, context=context, timeout=10)
    try:
        connection.request("GET", "/version")
        answer = connection.getresponse()
        assert (answer.status, json.loads(answer.read())) == (200, real_node.client.get("/version"))
    finally:
        connection.close()


def test_a_pod_behind_its_own_service_is_reached_by_name_from_another(real_node):
    ns = real_node.namespace
    server = bare_pod("web", "mkdir -p /www && echo hello from web > /www/index.html && exec httpd -f -p 8080 -h /www",
                      real_node.image)
    server["metadata"]["labels"] = {"app": "web"}
    server["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "name": "http"}]
    server["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    real_node.client.post(pod_path(ns), server)
    service = real_node.client.post(f"/api/v1/namespaces/{ns}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}})
    cluster_ip = service["spec"]["clusterIP"]

    def ready_endpoints():
        slices = real_node.client.get(f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                                      labelSelector="kubernetes.io/service-name=web")["items"]
        return [(a, p["port"]) for s in slices for e in s.get("endpoints") or ()
                if (e.get("conditions") or {}).get("ready") for a in e["addresses"] for p in s.get("ports") or ()]

    endpoints = real_node.wait(ready_endpoints, timeout=90, what="the web Service's ready endpoint")
    pod_ip = real_node.client.get(pod_path(ns, "web"))["status"]["podIP"]
    assert endpoints == [(pod_ip, 8080)]
    # kube-proxy writes its rules within a second of the EndpointSlice; the client tries for up to 30 s.
    fetch = "i=0; until wget -q -O- {url}; do i=$((i+1)); [ $i -ge 30 ] && exit 1; sleep 1; done"
    parts = run_steps(real_node, "client", {
        "lookup": f"nslookup -type=A web.{ns}.svc.cluster.local",
        "by name": fetch.format(url=f"http://web.{ns}.svc.cluster.local/"),
        "by short name": fetch.format(url="http://web/")})
    assert addresses(parts["lookup"]) == [cluster_ip], parts["lookup"]
    assert (parts["by name"], parts["by short name"]) == ("hello from web", "hello from web")
    try:
        real_node.client.delete(f"/api/v1/namespaces/{ns}/services/web")
    except ApiError:
        pass
