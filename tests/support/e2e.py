"""The config of a real ``flotilla serve`` on loopback with SQLite (PORT and DB filled in by each test)."""



CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
  - {name: armada-preemptible, priority: 20000, preemptible: true}
defaultPriorityClass: armada-default
queues:
  - {name: A, weight: 1, owners: [alice]}
  - {name: B, weight: 1, owners: [bob]}
evict: {probability: 0}
lease: {timeout: 1.5s, maxRetries: 3}
cycle: {period: 0.2s}
server: {listen: "127.0.0.1:PORT"}
store: {url: "sqlite:///DB"}
auth:
  tokens:
    - {token: alice-token, user: alice}
    - {token: bob-token, user: bob}
    - {token: admin-token, user: root, groups: [admins]}
  adminGroups: [admins]
clusters:
  - name: c1
    kind: simulated
    nodes: [{count: 2, namePrefix: c1-node, resources: {cpu: 8, memory: 32Gi}}]
  - name: c2
    kind: simulated
    nodes: [{count: 2, namePrefix: c2-node, resources: {cpu: 8, memory: 32Gi}}]
"""
