"""Reading a /metrics exposition back with prometheus_client's own parser, for the metrics tests."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def samples_of(text: bytes | str) -> list[Sample]:
    """Every sample of an exposition text, parsed as Prometheus would (a malformed text raises)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return [found for family in text_string_to_metric_families(text) for found in family.samples]


def samples_named(samples: list[Sample], name: str) -> list[Sample]:
    return [found for found in samples if found.name == name]


def sample(samples: list[Sample], name: str, labels: dict[str, str]) -> float:
    """The value of the one sample ``name`` with exactly ``labels``; AssertionError unless there is one."""
    matching = [found.value for found in samples if found.name == name and found.labels == labels]
    assert len(matching) == 1, f"{len(matching)} samples {name}{labels}"
    return matching[0]
