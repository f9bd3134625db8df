"""Inter-pod affinity, anti-affinity and topology spread, as kube-scheduler's InterPodAffinity and
PodTopologySpread plugins define them, on simulated clusters (schedule-once on state files)."""

from __future__ import annotations

from tests.support.scenario import config, placements, run_once


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


SPREAD_ZONE = ("topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, "
               "whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]")


def test_spread_over_zones_of_one_and_three_nodes_puts_four_in_each(tmp_path):
    zones = {"node-1": "a", "node-2": "b", "node-3": "b", "node-4": "b"}
    out = run_once(tmp_path, config(), nodes(4, zones) + web_jobs(8, SPREAD_ZONE))
    placed = placements(out)
    assert len(placed) == 8
    per_zone = {"a": 0, "b": 0}
    for node in placed.values():
        per_zone[zones[node]] += 1
    assert per_zone == {"a": 4, "b": 4}
    # Zone a (one node) and zone b take turns: best fit stacks zone b's pods on node-2.
    assert placed == {"web-1": "node-1", "web-2": "node-2", "web-3": "node-1", "web-4": "node-2",
                      "web-5": "node-1", "web-6": "node-2", "web-7": "node-1", "web-8": "node-2"}


def test_spread_refuses_a_node_whose_zone_would_pass_the_skew(tmp_path):
    # Zone a has one node of 2 cores, zone b two: once a is full, b takes one more than a and no more.
    zones = {"node-1": "a", "node-2": "b", "node-3": "b"}
    state = nodes(3, zones, cpu=2) + web_jobs(6, SPREAD_ZONE)
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"web-1": "node-1", "web-2": "node-2", "web-3": "node-1", "web-4": "node-2",
                               "web-5": "node-3"}
    assert out["reasons"] == {"web-6": "0/3 nodes are available: 2 Insufficient cpu, "
                                       "1 node(s) didn't match pod topology spread constraints"}


E2E_KEY = "kubernetes.io/e2e-pts-filter"


def test_e2e_four_pods_with_max_skew_one_are_evenly_distributed_into_two_nodes(tmp_path):
    """test/e2e/scheduling/predicates.go, "validates 4 pods with MaxSkew=1 are evenly distributed into 2 nodes":
    two of four nodes get a dedicated topology key (the node's name as value); four pods labelled
    ``e2e-pts-filter: ""`` require those two nodes by node affinity and spread over the key (maxSkew 1,
    DoNotSchedule, selector ``e2e-pts-filter Exists``)."""
    state = f"""
clusters:
  - name: c1
    nodes:
      - {{name: node-1, resources: {{cpu: 32}}, labels: {{kubernetes.io/hostname: node-1}}}}
      - {{name: node-2, resources: {{cpu: 32}}, labels: {{kubernetes.io/hostname: node-2, {E2E_KEY}: node-2}}}}
      - {{name: node-3, resources: {{cpu: 32}}, labels: {{kubernetes.io/hostname: node-3}}}}
      - {{name: node-4, resources: {{cpu: 32}}, labels: {{kubernetes.io/hostname: node-4, {E2E_KEY}: node-4}}}}
jobs:
""" + "\n".join(
        f"""  - {{id: e2e-pts-filter-{k}, queue: A, requests: {{cpu: 100m}}, submitted: {k}, namespace: e2e-ns,
     labels: {{e2e-pts-filter: ""}},
     affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms:
       [{{matchExpressions: [{{key: {E2E_KEY}, operator: In, values: [node-2, node-4]}}]}}]}}}}}},
     topologySpreadConstraints: [{{maxSkew: 1, topologyKey: {E2E_KEY}, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {{matchExpressions: [{{key: e2e-pts-filter, operator: Exists}}]}}}}]}}"""
        for k in range(1, 5)) + "\n"
    out = run_once(tmp_path, config(), state)
    placed = placements(out)
    assert sorted(placed.values()) == ["node-2", "node-2", "node-4", "node-4"]


AFFINE = ("affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
          "[{labelSelector: {matchLabels: {app: web}}, topologyKey: topology.kubernetes.io/zone}]}}")


def test_the_first_pod_of_a_self_affine_group_goes_anywhere_and_the_rest_follow_it(tmp_path):
    zones = {"node-1": "a", "node-2": "b"}
    # Two cores per node: the group fills zone a, then waits (zone b holds none of its pods).
    out = run_once(tmp_path, config(), nodes(2, zones, cpu=2) + web_jobs(3, AFFINE))
    assert placements(out) == {"web-1": "node-1", "web-2": "node-1"}
    assert out["reasons"] == {"web-3": "0/2 nodes are available: 1 Insufficient cpu, "
                                       "1 node(s) didn't match pod affinity rules"}


def test_a_pod_affine_to_pods_that_do_not_select_it_waits_for_them(tmp_path):
    state = nodes(2, {"node-1": "a", "node-2": "b"}) + """jobs:
  - {id: cache, queue: A, requests: {cpu: 1}, state: running, node: node-2, labels: {app: cache}}
  - {id: web, queue: A, requests: {cpu: 1}, submitted: 1, labels: {app: web},
     affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution:
       [{labelSelector: {matchLabels: {app: db}}, topologyKey: topology.kubernetes.io/zone}]}}}
  - {id: near-cache, queue: A, requests: {cpu: 1}, submitted: 2, labels: {app: web},
     affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution:
       [{labelSelector: {matchLabels: {app: cache}}, topologyKey: topology.kubernetes.io/zone}]}}}
"""
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"near-cache": "node-2"}
    assert out["reasons"] == {"web": "0/2 nodes are available: 2 node(s) didn't match pod affinity rules"}


def test_running_pods_anti_affinity_keeps_the_pods_it_selects_out_of_its_domain(tmp_path):
    state = nodes(3) + """jobs:
  - {id: loner, queue: A, requests: {cpu: 1}, state: running, node: node-1, labels: {app: loner},
     affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution:
       [{labelSelector: {matchLabels: {app: web}}, topologyKey: kubernetes.io/hostname}]}}}
  - {id: web, queue: A, requests: {cpu: 1}, submitted: 1, labels: {app: web}}
  - {id: other, queue: A, requests: {cpu: 1}, submitted: 2, labels: {app: other}}
  - {id: elsewhere, queue: A, requests: {cpu: 1}, submitted: 3, namespace: team-b, labels: {app: web}}
"""
    out = run_once(tmp_path, config(), state)
    # web is kept off node-1 (its own rules say nothing); other, and web of another namespace, are not.
    assert placements(out) == {"web": "node-2", "other": "node-1", "elsewhere": "node-1"}


def test_a_gangs_members_count_for_each_other_while_it_is_placed(tmp_path):
    members = "\n".join(
        f"  - {{id: g-{k}, queue: A, requests: {{cpu: 1}}, submitted: {k}, labels: {{app: web}}, "
        f"gang: {{id: g, cardinality: {{n}}}}, {ANTI}}}" for k in range(1, 4))
    out = run_once(tmp_path, config(), nodes(3) + "jobs:\n" + members.replace("{n}", "3") + "\n")
    assert sorted(placements(out).values()) == ["node-1", "node-2", "node-3"]
    # Four members on three nodes: the gang cannot be placed, none of it is.
    four = members.replace("{n}", "4") + "\n" + \
        f"  - {{id: g-4, queue: A, requests: {{cpu: 1}}, submitted: 4, labels: {{app: web}}, " \
        f"gang: {{id: g, cardinality: 4}}, {ANTI}}}\n"
    out = run_once(tmp_path, config(), nodes(3) + "jobs:\n" + four)
    assert placements(out) == {}


# -- served jobs (the API, the store, the service loop) on a simulated cluster -----------------------

def test_served_jobs_with_required_anti_affinity_land_one_per_node_and_the_fifth_waits(tmp_path):
    from tests.support.service import config as service_config
    from tests.support.service import job, job_file
    from flotilla.service.jobspec import prepare
    from tests.support.loop import make, run_until

    settings_, store, loop, clock = make(tmp_path, service_config())
    specs = []
    for k in range(5):
        spec = job(f"w{k}", cpu="1")
        spec["labels"] = {"app": "web"}
        spec["podSpec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        spec["annotations"] = {"flotilla.io/simulated-duration": "1h"}
        specs.append(spec)
    _, new = prepare(job_file("A", "s", specs), settings_)
    ids = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]
    run_until(loop, clock, lambda: sum(store.get_job(i)["state"] == "running" for i in ids) == 4)
    nodes = sorted(store.get_job(i)["node"] for i in ids[:4])
    assert nodes == ["c1-node-1", "c1-node-2", "c2-node-1", "c2-node-2"]
    for _ in range(3):
        loop.run_cycle()
        clock.now += 1
    assert store.get_job(ids[4])["state"] == "queued"
    store.close()


def test_pods_on_nodes_without_the_topology_key_do_not_count_for_the_first_pod_rule(tmp_path):
    # An app=web pod runs on node-1, which has no zone: as kube-scheduler counts, no pod matches in any zone, so
    # the first of a self-affine group may still go to a zoned node; a pod affine to cache (none anywhere) waits.
    state = """clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
      - {name: node-2, resources: {cpu: 32}, labels: {topology.kubernetes.io/zone: b}}
jobs:
  - {id: old, queue: A, requests: {cpu: 1}, state: running, node: node-1, labels: {app: web}}
""" + web_jobs(1, AFFINE).replace("jobs:\n", "")
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"web-1": "node-2"}


def spread_jobs(count: int, constraint: str, extra: str = "") -> str:
    return "jobs:\n" + "\n".join(
        f"  - {{id: web-{k}, queue: A, requests: {{cpu: 1}}, submitted: {k}, labels: {{app: web}}{extra}, "
        f"topologySpreadConstraints: [{{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, "
        f"labelSelector: {{matchLabels: {{app: web}}}}, {constraint}}}]}}" for k in range(1, count + 1)) + "\n"


def test_min_domains_above_the_zones_there_are_makes_the_fewest_zero(tmp_path):
    zones = {"node-1": "a", "node-2": "b"}
    out = run_once(tmp_path, config(), nodes(2, zones) + spread_jobs(4, "whenUnsatisfiable: DoNotSchedule, "
                                                                        "minDomains: 3"))
    # Two zones of three asked: each may hold maxSkew (1) pod more than 0.
    assert placements(out) == {"web-1": "node-1", "web-2": "node-2"}
    assert out["reasons"]["web-3"] == \
        "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints"


def test_node_affinity_policy_decides_which_zones_count(tmp_path):
    zones = {"node-1": "a", "node-2": "b"}
    only_a = ", nodeSelector: {topology.kubernetes.io/zone: a}"
    # Honor (the default): only zone a is eligible, its own minimum: every pod fits there.
    out = run_once(tmp_path, config(), nodes(2, zones) + spread_jobs(3, "whenUnsatisfiable: DoNotSchedule", only_a))
    assert placements(out) == {"web-1": "node-1", "web-2": "node-1", "web-3": "node-1"}
    # Ignore: zone b (no pod) counts, so zone a holds one.
    out = run_once(tmp_path, config(), nodes(2, zones) + spread_jobs(
        3, "whenUnsatisfiable: DoNotSchedule, nodeAffinityPolicy: Ignore", only_a))
    assert placements(out) == {"web-1": "node-1"}


def test_schedule_anyway_scores_and_never_refuses(tmp_path):
    zones = {"node-1": "a", "node-2": "b", "node-3": "b"}
    out = run_once(tmp_path, config(), nodes(3, zones, cpu=2) + spread_jobs(6, "whenUnsatisfiable: ScheduleAnyway"))
    placed = placements(out)
    assert len(placed) == 6  # zone a fills (2), then zone b takes the rest: a preference gives way to room
    assert sorted(placed.values()) == ["node-1", "node-1", "node-2", "node-2", "node-3", "node-3"]
    assert [placed[f"web-{k}"] for k in (1, 2)] == ["node-1", "node-2"]


def test_other_schedulers_pods_count_and_terminating_ones_not_for_spread():
    import random

    from flotilla.config import load_config
    from flotilla.core.model import ClusterSnapshot, ForeignPod, Job, Node, Queue, Snapshot
    from flotilla.core.podrules import parse_pod_rules
    from flotilla.scheduler import Scheduler

    scheduler = Scheduler(load_config(None))
    zone = "topology.kubernetes.io/zone"
    cluster_nodes = [Node(f"node-{k}", "c1", {"cpu": 32000}, {"kubernetes.io/hostname": f"node-{k}", zone: z})
                     for k, z in ((1, "a"), (2, "b"))]
    web = {"app": "web"}
    spread = parse_pod_rules(None, [{"maxSkew": 1, "topologyKey": zone, "whenUnsatisfiable": "DoNotSchedule",
                                     "labelSelector": {"matchLabels": web}}], "default", web)
    anti = parse_pod_rules({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": web}, "topologyKey": zone}]}}, None, "default", web)

    def place(rules, terminating: bool) -> dict[str, str]:
        # Two app=web pods of someone else on node-1 (zone a), terminating or not.
        others = tuple(ForeignPod(f"default/other-{k}", "default", web, terminating=terminating) for k in range(2))
        job = Job("web", "A", "s", 0, "armada-preemptible", 0.0, {"cpu": 1000}, labels=web, namespace="default",
                  pod_rules=rules)
        snapshot = Snapshot([ClusterSnapshot("c1", cluster_nodes, foreign_pods={"node-1": others})], [job],
                            [Queue("A")], scheduler.priority_classes(), "armada-default")
        scheduler.state = None
        decisions = scheduler.run_cycle(snapshot, random.Random(0),
                                        actions=[a for a in scheduler.actions if a.name != "lease"])
        return {p.job.id: p.node for p in decisions.scheduled}

    # Zone a holds two of them: the spread sends the pod to zone b; terminating, they do not count (best fit:
    # node-1, the first of two empty-looking nodes).
    assert place(spread, False) == {"web": "node-2"}
    assert place(spread, True) == {"web": "node-1"}
    # Anti-affinity counts them either way, as kube-scheduler's InterPodAffinity does.
    assert place(anti, False) == {"web": "node-2"}
    assert place(anti, True) == {"web": "node-2"}
