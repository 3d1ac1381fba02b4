"""ApiVersions of a real broker process equals Kafka 4.0's, for every API the broker serves.

Two references: the Kafka 4.0 JSON specs in tools/kafka-protocol (validVersions, whose lowest
version is what KIP-896 left, and `listeners`), and kafka-python's table of what a real Kafka
4.0 broker answers (recorded by kafka-python from a running 4.0 broker, so it also shows the
exceptions to the specs Kafka makes, e.g. Produce advertised from v0).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from raw_client import RawClient

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

SPEC_DIR = Path(__file__).resolve().parents[2] / "tools" / "kafka-protocol" / "messages"

# Kafka 4.0 advertises Produce from v0 though it decodes only v3 and up (KAFKA-18659).
PRODUCE_ADVERTISED_MIN = 0


def spec_ranges() -> dict[int, tuple[int, int, list[str]]]:
    """api key -> (lowest, highest, listeners) of each request spec Kafka 4.0 serves."""
    ranges = {}
    for path in SPEC_DIR.glob("*Request.json"):
        spec = json.loads(path.read_text())
        valid = spec["validVersions"]
        if valid == "none":
            continue  # removed APIs (LeaderAndIsr, ...)
        low, _, high = valid.partition("-")
        ranges[spec["apiKey"]] = (int(low), int(high or low), spec.get("listeners", []))
    return ranges


def advertised(broker) -> m.ApiVersionsResponse:
    with RawClient(broker.host, broker.port) as client:
        response = client.call(18, 4, m.ApiVersionsRequest(client_software_name="odradek-test",
                                                         client_software_version="1"))
    assert response.error_code == ErrorCode.NONE
    return response


@pytest.fixture(scope="module")
def answer(odradek_broker):
    return advertised(odradek_broker)


def test_every_served_api_has_kafka40_spec_range(answer):
    specs = spec_ranges()
    served = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert served, "no API advertised"
    differences = {}
    for key, got in sorted(served.items()):
        assert key in specs, f"api {key} is not a Kafka 4.0 API"
        low, high, listeners = specs[key]
        assert "broker" in listeners, f"api {key} is not served on Kafka broker listeners"
        expected = (PRODUCE_ADVERTISED_MIN if key == 0 else low, high)
        if got != expected:
            differences[key] = (got, expected)
    assert differences == {}, "api key: (Odradek's, Kafka 4.0's)"


def test_served_apis_match_a_real_kafka40_broker(answer):
    """kafka-python's table of a real 4.0 broker: every API Odradek serves has its range."""
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    kafka40 = BROKER_API_VERSIONS[(4, 0)]
    served = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    unknown_to_kafka = sorted(set(served) - set(kafka40))
    assert unknown_to_kafka == []
    assert {key: served[key] for key in served} == {key: kafka40[key] for key in served}
    # The core APIs every 4.0 client needs are among them (the APIs Kafka 4.0 serves that
    # Odradek does not yet are listed in docs/compatibility.md).
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 32, 44, 60, 68, 69} <= set(served)


def test_kafka_python_infers_4_0(odradek_broker):
    from kafka import KafkaAdminClient
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    answer = advertised(odradek_broker)
    versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert infer_broker_version_from_api_versions(versions) == (4, 0)
    admin = KafkaAdminClient(bootstrap_servers=odradek_broker.bootstrap,
                             request_timeout_ms=10000)
    try:
        # kafka-python 3 leaves config["api_version"] None and infers the version from the
        # bootstrap broker's ApiVersions answer.
        assert admin._manager.broker_version == (4, 0)
    finally:
        admin.close()


COMPATIBILITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"


def documented_ranges() -> dict[int, tuple[int, int]]:
    """api key -> (lowest, highest) of docs/compatibility.md's table of served APIs: the
    first column names the APIs ("Fetch (1)"), the second their ranges in the same order."""
    text = COMPATIBILITY_DOC.read_text()
    section = text[text.index("## APIs served by the broker"):]
    section = section[:section.index("\n## ", 1)]
    ranges: dict[int, tuple[int, int]] = {}
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith(("| API ", "|---")):
            continue
        apis, versions = line.split(" | ")[:2]
        keys = [int(key) for key in re.findall(r"\((\d+)\)", apis)]
        spans = [span.split("-") for span in versions.split(", ")]
        assert len(keys) == len(spans), line
        for key, span in zip(keys, spans):
            assert key not in ranges, f"api {key} listed twice"
            ranges[key] = (int(span[0]), int(span[-1]))
    return ranges


def test_compatibility_doc_lists_what_the_broker_advertises(answer):
    advertised = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    documented = documented_ranges()
    wrong = {key: (documented.get(key), advertised.get(key))
             for key in sorted(set(documented) | set(advertised))
             if documented.get(key) != advertised.get(key)}
    assert wrong == {}, "api key: (docs/compatibility.md's, the broker's)"
