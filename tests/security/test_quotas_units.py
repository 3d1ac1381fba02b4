"""Client quotas and connection limits without a broker: resolution in Kafka's precedence
order, the throttle arithmetic over a sampled rate (ManualClock), AlterClientQuotas validation
and DescribeClientQuotas matching, connection limits."""

from __future__ import annotations

import pytest

from odradek.clock import ManualClock
from odradek.controller.client_quota_control import alter_client_quotas
from odradek.metadata.image import replay_records
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.server.client_quotas import (
    ClientQuotaManager,
    ClientQuotas,
    resolve_quota,
    throttle_time_ms,
    user_of,
)
from odradek.server.connection_quotas import ConnectionQuotas
from odradek.server.handlers.client_quotas import (
    MATCH_TYPE_DEFAULT,
    MATCH_TYPE_EXACT,
    MATCH_TYPE_SPECIFIED,
    describe_client_quotas,
)
from odradek.server.quotas import Rate

A = m.AlterClientQuotasRequest
D = m.DescribeClientQuotasRequest
KEY = "producer_byte_rate"


def entry(pairs, **ops):
    return A.EntryData(entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in pairs],
                       ops=[A.OpData(key=k, value=v if v is not None else 0.0,
                                     remove=v is None) for k, v in ops.items()])


def image_with(*entries):
    results, records = alter_client_quotas(replay_records([]), list(entries))
    assert all(result.error == ErrorCode.NONE for _entry, result in results), results
    return replay_records(records)


# The eight levels, most specific first, with the value each sets.
LEVELS = [
    ([("user", "alice"), ("client-id", "app")], 1),
    ([("user", "alice"), ("client-id", None)], 2),
    ([("user", "alice")], 3),
    ([("user", None), ("client-id", "app")], 4),
    ([("user", None), ("client-id", None)], 5),
    ([("user", None)], 6),
    ([("client-id", "app")], 7),
    ([("client-id", None)], 8),
]


def test_resolution_follows_kafkas_precedence_order():
    # Drop the most specific level one by one: the next one takes over.
    for first in range(len(LEVELS)):
        image = image_with(*[entry(pairs, producer_byte_rate=value)
                             for pairs, value in LEVELS[first:]])
        bound, _sensor = resolve_quota(image.client_quotas, KEY, "alice", "app")
        assert bound == LEVELS[first][1]
    assert resolve_quota(replay_records([]).client_quotas, KEY, "alice", "app") is None


def test_a_level_without_the_key_is_skipped():
    image = image_with(entry([("user", "alice")], consumer_byte_rate=10),
                       entry([("client-id", None)], producer_byte_rate=99))
    assert resolve_quota(image.client_quotas, KEY, "alice", "app")[0] == 99
    assert resolve_quota(image.client_quotas, "consumer_byte_rate", "alice", "app")[0] == 10


def test_who_shares_the_rate_depends_on_the_level():
    image = image_with(entry([("user", "alice")], producer_byte_rate=100),
                       entry([("client-id", None)], producer_byte_rate=50))
    # A user quota is shared by all the user's client ids; a client-id default is per id.
    assert resolve_quota(image.client_quotas, KEY, "alice", "a")[1] == ("alice", "")
    assert resolve_quota(image.client_quotas, KEY, "alice", "b")[1] == ("alice", "")
    assert resolve_quota(image.client_quotas, KEY, "bob", "b")[1] == ("", "b")


def test_user_of_a_principal():
    assert user_of("User:alice") == "alice"
    assert user_of("User:ANONYMOUS") == "ANONYMOUS"


def test_throttle_time_as_kafka_computes_it():
    clock = ManualClock(start_ms=0)
    rate = Rate(samples=11, window_ms=1000)
    now = int(clock.monotonic() * 1000)
    rate.record(20_000, now)
    # One burst at start: measured over the padded 10 windows, 2000 B/s.
    assert rate.window_size_ms(now) == 10_000
    assert rate.measure(now) == pytest.approx(2000)
    # (2000 - 1000) / 1000 * 10 s
    assert throttle_time_ms(rate, 1000, now) == 10_000
    assert throttle_time_ms(rate, 4000, now) == 0


def test_manager_throttles_only_over_the_bound_and_recovers():
    clock = ManualClock(start_ms=0)
    manager = ClientQuotaManager(KEY, samples=11, window_ms=1000, clock=clock)
    manager.update(image_with(entry([("client-id", "app")], producer_byte_rate=1000))
                   .client_quotas)
    assert manager.record_and_get_throttle_ms("u", "other", 10**9) == 0  # not quota'd
    # 10 windows of 1000 B/s: exactly at the bound.
    for _ in range(10):
        assert manager.record_and_get_throttle_ms("u", "app", 1000) == 0
        clock.advance(1000)
    throttle = manager.record_and_get_throttle_ms("u", "app", 5000)
    assert throttle > 0
    clock.advance(throttle)
    # Having waited, the client is back at (about) its bound.
    assert manager.record_and_get_throttle_ms("u", "app", 0) <= 1


def test_resolution_cache_drops_on_new_quotas():
    manager = ClientQuotaManager(KEY)
    first = image_with(entry([("client-id", "app")], producer_byte_rate=1000))
    manager.update(first.client_quotas)
    assert manager.quota("u", "app")[0] == 1000
    second = replay_records([m.ClientQuotaRecord(
        entity=[m.ClientQuotaRecord.EntityData(entity_type="client-id", entity_name="app")],
        key=KEY, value=2000.0)], base=first)
    manager.update(second.client_quotas)
    assert manager.quota("u", "app")[0] == 2000
    manager.update(replay_records([]).client_quotas)
    assert not manager.enabled


def test_request_quota_throttle_is_bounded_by_one_window():
    clock = ManualClock(start_ms=0)
    quotas = ClientQuotas(samples=11, window_s=1, clock=clock)
    quotas.apply_image(image_with(entry([("user", None)], request_percentage=1)))
    request = m.MetadataRequest()
    throttle, _ = quotas.throttle(3, "User:bob", "c", request, m.MetadataResponse(), 10,
                                  handler_ns=5_000_000_000)  # 5 s of handler time
    assert throttle == 1000


def test_throttled_fetch_is_answered_without_data_and_not_counted():
    clock = ManualClock(start_ms=0)
    quotas = ClientQuotas(samples=11, window_s=1, clock=clock)
    quotas.apply_image(image_with(entry([("client-id", "c")], consumer_byte_rate=100)))
    FR = m.FetchResponse
    response = FR(session_id=7, responses=[FR.FetchableTopicResponse(topic="t", partitions=[
        FR.PartitionData(partition_index=0, records=b"x" * 5000)])])
    throttle, answer = quotas.throttle(1, "User:ANONYMOUS", "c", m.FetchRequest(replica_id=-1),
                                       response, 100, 0)
    assert throttle == int((500 - 100) / 100 * 10_000)
    assert answer.responses == [] and answer.session_id == 7
    assert quotas.fetch._rates[("", "c")].measure(0) == 0  # unrecorded
    # The cap on one fetch: bound x (samples - 1) windows.
    assert quotas.fetch_max_bytes("User:ANONYMOUS", "c") == 1000
    # A follower's fetch is not a consumer's.
    throttle, _ = quotas.throttle(1, "User:ANONYMOUS", "c", m.FetchRequest(replica_id=2),
                                  response, 100, 0)
    assert throttle == 0


def test_alter_validation_errors_as_kafka():
    image = replay_records([])
    cases = [
        (entry([], producer_byte_rate=1), "Invalid empty client quota entity"),
        (entry([("group", "g")], producer_byte_rate=1),
         "Unhandled client quota entity type: group"),
        (entry([("user", "")], producer_byte_rate=1), "Empty user not supported"),
        (entry([("user", "a"), ("ip", "1.2.3.4")], connection_creation_rate=1),
         "Invalid empty client quota entity"),
        (entry([("user", "b")], producer_byte_rate=1.5),
         "Configuration producer_byte_rate must be a Long value"),
        (entry([("user", "c")], connection_creation_rate=1),
         "Invalid configuration key connection_creation_rate"),
        (entry([("ip", "1.2.3.4")], producer_byte_rate=1),
         "Invalid configuration key producer_byte_rate"),
    ]
    results, records = alter_client_quotas(image, [e for e, _ in cases])
    assert records == []
    for (_entry, result), (_e, message) in zip(results, cases):
        assert result.error == ErrorCode.INVALID_REQUEST
        assert result.message == message
    duplicate_key = A.EntryData(entity=[A.EntityData(entity_type="user", entity_name="a")],
                                ops=[A.OpData(key=KEY, value=1.0), A.OpData(key=KEY, value=2.0)])
    [(_e, result)], _ = alter_client_quotas(image, [duplicate_key])
    assert result.message.startswith("Duplicate quota key producer_byte_rate")
    results, records = alter_client_quotas(image, [entry([("user", "a")], producer_byte_rate=1),
                                                   entry([("user", "a")], producer_byte_rate=2)])
    assert [r.error for _e, r in results] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
    assert len(records) == 1


def test_alter_writes_only_changes_and_removes_existing_keys():
    image = image_with(entry([("user", "a")], producer_byte_rate=10, consumer_byte_rate=20))
    _results, records = alter_client_quotas(image, [entry(
        [("user", "a")], producer_byte_rate=10, consumer_byte_rate=None, request_percentage=None)])
    assert [(r.key, r.remove) for r in records] == [("consumer_byte_rate", True)]
    after = replay_records(records, base=image)
    assert dict(after.client_quotas[(("user", "a"),)]) == {KEY: 10}


def component(kind, match_type, match=None):
    return D.ComponentData(entity_type=kind, match_type=match_type, match=match)


def test_describe_match_types_and_strict():
    image = image_with(entry([("user", "alice")], producer_byte_rate=1),
                       entry([("user", "alice"), ("client-id", "app")], producer_byte_rate=2),
                       entry([("user", None)], producer_byte_rate=3),
                       entry([("client-id", None)], producer_byte_rate=4))
    quotas = image.client_quotas

    def values(components, strict=False):
        return sorted(dict(v)[KEY] for _e, v in describe_client_quotas(quotas, components,
                                                                        strict))
    assert values([component("user", MATCH_TYPE_EXACT, "alice")]) == [1, 2]
    assert values([component("user", MATCH_TYPE_EXACT, "alice")], strict=True) == [1]
    assert values([component("user", MATCH_TYPE_DEFAULT)]) == [3]
    assert values([component("user", MATCH_TYPE_SPECIFIED)]) == [1, 2, 3]
    assert values([component("user", MATCH_TYPE_SPECIFIED),
                   component("client-id", MATCH_TYPE_SPECIFIED)]) == [2]
    assert values([component("client-id", MATCH_TYPE_DEFAULT)], strict=True) == [4]
    assert values([]) == [1, 2, 3, 4]
    assert values([], strict=True) == []


@pytest.mark.parametrize("components, code, message", [
    ([component("user", MATCH_TYPE_EXACT, None)], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([component("user", MATCH_TYPE_DEFAULT, "x")], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([component("user", MATCH_TYPE_SPECIFIED), component("user", MATCH_TYPE_DEFAULT)],
     ErrorCode.INVALID_REQUEST, "Entity type user cannot appear more than once in the filter."),
    ([component("group", MATCH_TYPE_SPECIFIED)], ErrorCode.UNSUPPORTED_VERSION,
     "Unsupported entity type group"),
    ([component("ip", MATCH_TYPE_SPECIFIED), component("user", MATCH_TYPE_SPECIFIED)],
     ErrorCode.INVALID_REQUEST, ("Invalid entity filter component combination. IP filter "
                                 "component should not be used with user or clientId filter "
                                 "component.")),
    ([component("user", 7)], ErrorCode.INVALID_REQUEST, "Unknown match type 7"),
])
def test_describe_refuses_bad_filters(components, code, message):
    with pytest.raises(KafkaError) as failure:
        describe_client_quotas({}, components, False)
    assert failure.value.code == code and failure.value.message == message


def test_connection_limits_per_ip_overrides_and_total():
    limits = ConnectionQuotas({"max.connections.per.ip": 2,
                               "max.connections.per.ip.overrides": "10.0.0.9:4",
                               "max.connections": 5}, exempt_listeners=frozenset({"CTRL"}))
    assert limits.on_connect("L", "10.0.0.1") is None
    assert limits.on_connect("L", "10.0.0.1") is None
    assert "Too many connections from 10.0.0.1" in limits.on_connect("L", "10.0.0.1")
    for _ in range(3):
        assert limits.on_connect("L", "10.0.0.9") is None
    assert "Too many connections (maximum = 5)" in limits.on_connect("L", "10.0.0.9")
    assert limits.on_connect("CTRL", "10.0.0.9") is None  # exempt from the broker-wide limit
    limits.on_disconnect("L", "10.0.0.1")
    assert limits.on_connect("L", "10.0.0.1") is None
    assert limits.total == 5


def test_connection_creation_rate_holds_new_connections():
    clock = ManualClock(start_ms=0)
    limits = ConnectionQuotas({"max.connection.creation.rate": 2}, samples=2,
                              window_ms=1000, clock=clock)
    held = [limits.on_connect("L", f"10.0.0.{i}") for i in range(5)]
    assert held[:2] == [None, None]
    assert all(isinstance(h, tuple) and h[1] > 0 for h in held[3:])


def test_connection_limits_are_dynamic():
    from odradek.metadata.image import RESOURCE_BROKER
    limits = ConnectionQuotas({"max.connections.per.ip": 100}, broker_id=1)
    image = replay_records([m.ConfigRecord(resource_type=RESOURCE_BROKER, resource_name="",
                                           name="max.connections.per.ip", value="1")])
    limits.apply_image(image)
    assert limits.on_connect("L", "h") is None
    assert limits.on_connect("L", "h") is not None


def test_ip_connection_creation_rate_closes_connections_over_it():
    clock = ManualClock(start_ms=0)
    limits = ConnectionQuotas({}, samples=2, window_ms=1000, clock=clock)
    limits.apply_image(image_with(entry([("ip", "10.0.0.1")], connection_creation_rate=2),
                                  entry([("ip", None)], connection_creation_rate=100)))
    answers = [limits.on_connect("L", "10.0.0.1") for _ in range(4)]
    assert answers[:2] == [None, None]
    assert "connection creation rate from 10.0.0.1" in answers[3]
    assert all(limits.on_connect("L", "10.0.0.2") is None for _ in range(4))  # the default
    assert limits.per_ip["10.0.0.1"] == 2  # the refused ones hold no slot


def test_token_bucket_as_kip_599():
    from odradek.server.quotas import TokenBucket
    bucket = TokenBucket(samples=2, window_ms=1000)
    assert bucket.measure(5, 0) == 10  # full: quota x samples x window
    bucket.record(5, 16, 0)
    assert bucket.measure(5, 0) == -6
    assert bucket.throttle_time_ms(5, 0) == 1200  # 6 partitions at 5 a second
    assert bucket.throttle_time_ms(5, 1200) == 0
    assert bucket.measure(5, 10_000) == 10  # refilled up to the burst only


class _Ctx:
    def __init__(self, version: int) -> None:
        self.principal, self.client_id, self.api_version = "User:ANONYMOUS", "c", version


def _create_topics_handler(calls):
    R = m.CreateTopicsResponse

    def handler(ctx, request):
        calls.append([t.name for t in request.topics])
        return R(topics=[R.CreatableTopicResult(
            name=t.name, error_code=ErrorCode.TOPIC_ALREADY_EXISTS if t.name == "exists"
            else ErrorCode.NONE) for t in request.topics])
    return handler


def _topics(*specs):
    CT = m.CreateTopicsRequest.CreatableTopic
    return m.CreateTopicsRequest(topics=[CT(name=n, num_partitions=p, replication_factor=1)
                                         for n, p in specs])


def test_controller_mutation_quota_strict_and_permissive():
    import asyncio

    from odradek.server.controller_mutation_quota import ControllerMutationQuotas
    clock = ManualClock(start_ms=0)
    image = image_with(entry([("client-id", "c")], controller_mutation_rate=2))
    quotas = ControllerMutationQuotas(lambda: image, lambda: 1, samples=2, window_ms=1000,
                                      clock=clock)
    quotas.apply_image(image)
    calls: list = []
    [handler] = quotas.wrap({19: _create_topics_handler(calls)}).values()
    # Strict (v6+): burst of 4 credits; "a" (3) goes, "b" (3) goes into debt, "c" is refused.
    response = asyncio.run(handler(_Ctx(7), _topics(("a", 3), ("b", 3), ("c", 1))))
    assert calls[-1] == ["a", "b"]
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("a", 0), ("b", 0), ("c", ErrorCode.THROTTLING_QUOTA_EXCEEDED)]
    assert response.throttle_time_ms == 1000  # 2 partitions owed at 2 a second
    # A topic that fails spends nothing.
    clock.advance(10_000)
    response = asyncio.run(handler(_Ctx(7), _topics(("exists", 4), ("d", 4))))
    assert [t.error_code for t in response.topics] == [ErrorCode.TOPIC_ALREADY_EXISTS, 0]
    assert response.throttle_time_ms == 0
    # Permissive (v5): everything goes through, the debt is reported.
    response = asyncio.run(handler(_Ctx(5), _topics(("e", 3), ("f", 3))))
    assert calls[-1] == ["e", "f"] and all(t.error_code == 0 for t in response.topics)
    assert response.throttle_time_ms == 3000
