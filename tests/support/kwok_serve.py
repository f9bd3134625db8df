"""The config of a real ``flotilla serve`` with two KWOK clusters (filled in by each test)."""



CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
defaultPriorityClass: armada-default
queues:
  - {name: A, weight: 1, owners: [alice]}
  - {name: B, weight: 1, owners: [bob]}
evict: {probability: 0}
lease: {timeout: 20s, maxRetries: 3}
cycle: {period: 0.2s}
server: {listen: "127.0.0.1:PORT"}
store: {url: "sqlite:///DB"}
auth:
  tokens:
    - {token: alice-token, user: alice}
    - {token: bob-token, user: bob}
clusters:
"""
