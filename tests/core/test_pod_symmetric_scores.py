"""Symmetric inter-pod scores, as kube-scheduler's InterPodAffinity scores: a running pod's preferred affinity
(+weight), preferred anti-affinity (-weight) and required affinity (hardPodAffinityWeight, 1) toward the incoming
pod count for the nodes of the running pod's domain, whatever the incoming pod asks (simulated clusters)."""

from __future__ import annotations

from tests.support.scenario import config, placements, run_once

ZONE = "topology.kubernetes.io/zone"
# node-1 is the tightest fit (a 30-core filler), so best fit alone sends every small pod there.
HEAD = f"""clusters:
  - name: c1
    nodes:
      - {{name: node-1, resources: {{cpu: 32}}, labels: {{{ZONE}: a}}}}
      - {{name: node-2, resources: {{cpu: 32}}, labels: {{{ZONE}: b}}}}
      - {{name: node-3, resources: {{cpu: 32}}, labels: {{{ZONE}: b}}}}
jobs:
  - {{id: filler, queue: A, requests: {{cpu: 30}}, state: running, node: node-1}}
"""


def holder(name: str, node: str, affinity: str, labels: str = "{app: cache}") -> str:
    return (f"  - {{id: {name}, queue: A, requests: {{cpu: 1}}, state: running, node: {node}, labels: {labels}, "
            f"affinity: {affinity}}}\n")


def term(app: str, key: str = "kubernetes.io/hostname") -> str:
    return f"{{labelSelector: {{matchLabels: {{app: {app}}}}}, topologyKey: {key}}}"


def preferred(kind: str, weight: int, app: str, key: str = "kubernetes.io/hostname") -> str:
    return (f"{{{kind}: {{preferredDuringSchedulingIgnoredDuringExecution: "
            f"[{{weight: {weight}, podAffinityTerm: {term(app, key)}}}]}}}}")


WEB = "  - {id: web, queue: A, requests: {cpu: 1}, submitted: 1, labels: {app: web}}\n"
DB = "  - {id: db, queue: A, requests: {cpu: 1}, submitted: 2, labels: {app: db}}\n"


def test_a_running_pods_preferred_affinity_draws_the_pods_it_selects(tmp_path):
    state = HEAD + holder("cache", "node-3", preferred("podAffinity", 50, "web")) + WEB + DB
    out = run_once(tmp_path, config(), state)
    # web (selected) goes beside the cache pod; db (not selected) takes the best fit.
    assert placements(out) == {"web": "node-3", "db": "node-1"}


def test_a_running_pods_preferred_anti_affinity_keeps_the_pods_it_selects_away(tmp_path):
    state = HEAD + holder("loner", "node-1", preferred("podAntiAffinity", 50, "web")) + WEB + DB
    out = run_once(tmp_path, config(), state)
    # Best fit is node-1 for both: web is scored away from the loner (the next tightest, node-2), db is not.
    assert placements(out) == {"web": "node-2", "db": "node-1"}


def test_a_running_pods_required_affinity_scores_the_pods_it_selects_by_its_zone(tmp_path):
    required = f"{{podAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{term('web', ZONE)}]}}}}"
    # The holder (its own rule met by a web pod of someone in zone b) is on node-3, zone b: node-2 shares it.
    state = HEAD + "  - {id: old-web, queue: A, requests: {cpu: 20}, state: running, node: node-2, labels: {app: web}}\n" \
        + holder("fan", "node-3", required) + WEB
    out = run_once(tmp_path, config(), state)
    # Zone b holds the holder: node-2 (tighter of zone b's two) scores 1, node-1 (zone a) 0.
    assert placements(out) == {"web": "node-2"}


def test_weights_add_up_and_signs_count(tmp_path):
    # Two holders in zone b prefer web pods (+10 each), one in zone a prefers them more (+30): zone a wins; with
    # an anti-affinity of 25 beside it in zone a, zone b (20) beats zone a (30 - 25 = 5).
    # (node-1's filler leaves room for the holders and web there: 20 cores.)
    state = HEAD.replace("cpu: 30}", "cpu: 20}") + holder("b-1", "node-2", preferred("podAffinity", 10, "web", ZONE)) + \
        holder("b-2", "node-3", preferred("podAffinity", 10, "web", ZONE)) + \
        holder("a-1", "node-1", preferred("podAffinity", 30, "web", ZONE)) + WEB
    assert placements(run_once(tmp_path, config(), state)) == {"web": "node-1"}
    # Against zone b's 20 once a holder in zone a avoids web pods (30 - 25 = 5): zone b.
    state += holder("a-2", "node-1", preferred("podAntiAffinity", 25, "web", ZONE), labels="{app: other}")
    # (Zone b's two nodes score alike: the tighter, node-2, wins.)
    assert placements(run_once(tmp_path, config(), state)) == {"web": "node-2"}


def test_scores_follow_pods_placed_in_the_same_cycle(tmp_path):
    # A loner placed this cycle (avoiding web pods) keeps away the web pod queued after it.
    loner = ("  - {id: loner, queue: A, requests: {cpu: 1}, submitted: 0, labels: {app: loner}, "
             f"affinity: {preferred('podAntiAffinity', 50, 'web')}}}\n")
    out = run_once(tmp_path, config(), HEAD + loner + WEB)
    # The loner takes the tightest fit (node-1); web, whose best fit is node-1's last core, goes to node-2.
    assert placements(out) == {"loner": "node-1", "web": "node-2"}
    # Without the loner's rule, web takes that last core.
    plain = loner.replace(f", affinity: {preferred('podAntiAffinity', 50, 'web')}", "")
    assert placements(run_once(tmp_path, config(), HEAD + plain + WEB)) == {"loner": "node-1", "web": "node-1"}
