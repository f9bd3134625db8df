"""Inter-pod affinity, anti-affinity and topology spread, as kube-scheduler's InterPodAffinity and
PodTopologySpread plugins define them, on simulated clusters (schedule-once on state files)."""

from __future__ import annotations

from scenario import config, placements, run_once


def nodes(count: int, zones: dict[str, str] | None = None, cpu: int = 32) -> str:
    lines = ["clusters:", "  - name: c1", "    nodes:"]
    for k in range(1, count + 1):
        labels = {"kubernetes.io/hostname": f"node-{k}"}
        if zones:
            labels["topology.kubernetes.io/zone"] = zones[f"node-{k}"]
        text = ", ".join(f"{key}: {value}" for key, value in labels.items())
        lines.append(f"      - {{name: node-{k}, resources: {{cpu: {cpu}}}, labels: {{{text}}}}}")
    return "\n".join(lines) + "\n"


ANTI = ("affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
        "[{labelSelector: {matchLabels: {app: web}}, topologyKey: kubernetes.io/hostname}]}}")
PREFERRED_ANTI = ("affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: "
                  "[{weight: 100, podAffinityTerm: {labelSelector: {matchLabels: {app: web}}, "
                  "topologyKey: kubernetes.io/hostname}}]}}")


def web_jobs(count: int, rule: str, cpu: int = 1) -> str:
    return "jobs:\n" + "\n".join(
        f"  - {{id: web-{k}, queue: A, requests: {{cpu: {cpu}}}, submitted: {k}, labels: {{app: web}}, {rule}}}"
        for k in range(1, count + 1)) + "\n"


def test_required_anti_affinity_puts_one_pod_per_node_and_the_fifth_waits(tmp_path):
    out = run_once(tmp_path, config(), nodes(4) + web_jobs(5, ANTI))
    placed = placements(out)
    assert placed == {"web-1": "node-1", "web-2": "node-2", "web-3": "node-3", "web-4": "node-4"}
    assert out["reasons"] == {"web-5": "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules"}


def test_preferred_anti_affinity_binds_every_pod_spread_where_room_allows(tmp_path):
    # Best fit alone would stack all five on node-1; the preference spreads them, the fifth shares a node.
    out = run_once(tmp_path, config(), nodes(4) + web_jobs(5, PREFERRED_ANTI))
    placed = placements(out)
    assert placed == {"web-1": "node-1", "web-2": "node-2", "web-3": "node-3", "web-4": "node-4",
                      "web-5": "node-1"}
    # Room for two pods on one node, one on the others: the preference gives way to room, never refuses.
    small = nodes(2, cpu=2)
    out = run_once(tmp_path, config(), small + web_jobs(4, PREFERRED_ANTI))
    assert sorted(placements(out).values()) == ["node-1", "node-1", "node-2", "node-2"]
