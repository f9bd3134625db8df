"""A fake clock and the parsed ``/metrics`` of an in-process service."""

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def scrape(client: TestClient) -> dict[tuple, float]:
    """Every sample as {(name, (label, value), ...): value}."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, *sorted(sample.labels.items()))] = sample.value
    return out


def only(samples: dict, name: str) -> dict:
    return {key[1:]: value for key, value in samples.items() if key[0] == name}
