"""The node's control plane: the KWOK cluster (etcd, kube-apiserver, kwok-controller, kube-scheduler, through
kwokctl) and kube-controller-manager running :data:`CONTROLLERS`.
"""

from __future__ import annotations

from pathlib import Path

from flotilla.kwok.realnode import config, processes
from flotilla.kwok.realnode.layout import CLUSTER, RealNode, RealNodeError

#: The node lifecycle controller's period and grace: NotReady about this long after the kubelet's last heartbeat.
MONITOR_PERIOD, MONITOR_GRACE = "1s", "5s"
#: kube-controller-manager's controllers on the node's cluster, those a workload needs on a cluster of one's own:
#: a dead kubelet's node goes NotReady (node lifecycle), claims bind to volumes (persistentvolume binder), a
#: claim and a volume in use are deleted only once no pod uses them (persistentvolumeclaim-protection,
#: persistentvolume-protection: they take off the finalizers the API server puts on), a
#: batch/v1 Job makes its pods and completes (job), a Deployment makes its ReplicaSet and that its pods
#: (deployment, replicaset), a StatefulSet its numbered pods (statefulset), every namespace gets its ``default``
#: ServiceAccount (serviceaccount; ServiceAccount admission refuses a pod whose account is missing) and the
#: ``kube-root-ca.crt`` ConfigMap its pods' token volume holds (root-ca-certificate-publisher), legacy token
#: Secrets are filled (serviceaccount-token), a Service's endpoints follow its ready pods (endpoints,
#: endpointslice: what kube-proxy and CoreDNS read, network.py), what an owner's deletion leaves is collected
#: (garbage collector: a deleted Job's pods, a release's objects) and finished Jobs with a TTL are deleted
#: (ttl-after-finished).
#: Not run: the namespace controller (a deleted namespace stays Terminating), the pod GC, and those of clouds,
#: certificates, quotas and autoscaling, which nothing here uses.
CONTROLLERS = ("node-lifecycle-controller", "persistentvolume-binder-controller", "job-controller",
               "garbage-collector-controller", "ttl-after-finished-controller", "deployment-controller",
               "replicaset-controller", "statefulset-controller", "serviceaccount-controller",
               "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
               "endpoints-controller", "endpointslice-controller", "persistentvolumeclaim-protection-controller",
               "persistentvolume-protection-controller", "namespace-controller")
#: The API server's admission plugins turned off on the node's cluster: only TaintNodesByCondition (its
#: not-ready taint on the registering node would hold kube-scheduler and Flotilla back until the node
#: lifecycle controller's next pass); ServiceAccount admission runs, as on any cluster.
DISABLED_ADMISSION = ("TaintNodesByCondition",)


def start_cluster(rn: RealNode, bin_dir: Path) -> None:
    """Create (or start again) the KWOK cluster :data:`CLUSTER`, its kubeconfig written to the state directory."""
    from flotilla.kwok.cluster import KwokError, up
    from flotilla.kwok.realnode.network import API_CLUSTER_IP

    try:
        # Pods reach the API server at the `kubernetes` Service's ClusterIP: its certificate must name it.
        up(CLUSTER, nodes=0, kubeconfig=str(rn.kubeconfig), bin_dir=bin_dir, timeout=120, kube_scheduler=True,
           disable_admission=DISABLED_ADMISSION, cert_sans=(API_CLUSTER_IP,), extra_args=[
            # kwokctl 0.8.0 keeps a component's patches at the position its first --extra-args had; the
            # cluster's own API server argument is the first, so a new component must come right after it.
            # kwokctl passes --manage-all-nodes=true; the later flag wins: only fake-annotated nodes are faked.
            "kwok-controller=manage-all-nodes=false",
            "kwok-controller=manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            # pods/log: the API server reaches the kubelet at the node's InternalIP (its name resolves nowhere).
            "kube-apiserver=kubelet-preferred-address-types=InternalIP",
        ])
    except KwokError as exc:
        raise RealNodeError(f"cluster {CLUSTER}: {exc}") from None


def start_controller_manager(rn: RealNode, bin_dir: Path) -> None:
    """Start kube-controller-manager unless it runs."""
    from flotilla.kwok.cluster import workdir

    if processes.pid(rn, "kube-controller-manager") is not None:
        return
    pki = workdir(CLUSTER) / "pki"
    processes.spawn(rn, "kube-controller-manager", [
        str(bin_dir / "kube-controller-manager"), "--kubeconfig", str(config.cluster_kubeconfig()),
        f"--controllers={','.join(CONTROLLERS)}", "--leader-elect=false", "--secure-port=0",
        # The key kwokctl gives the API server to check service account tokens with (it signs with the same),
        # and the CA the ConfigMap kube-root-ca.crt publishes to every namespace.
        f"--service-account-private-key-file={pki / 'admin.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        f"--node-monitor-period={MONITOR_PERIOD}", f"--node-monitor-grace-period={MONITOR_GRACE}", "--v=1"])
