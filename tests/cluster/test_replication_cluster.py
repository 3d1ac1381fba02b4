"""Partition replication on a cluster of real processes: three dedicated controllers and three
brokers (4, 5, 6), so pausing or killing a broker never touches the metadata quorum.

What each replica holds is read from its segment files (the batches and their records), so
the checks are on offsets and data, not on what a broker says of itself.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest
from broker_process import free_port, metrics_url, scrape_metrics, wait_for_metrics, wait_until
from quorum_cluster import HOST, QuorumCluster, send_request
from server.raw_client import RawClient, produce_request

from odradek.metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch, iter_batches
from odradek.protocol.records.record import decode_records

START_TIMEOUT_S = 60.0
SETTLE_S = 30.0
LAG_MS = 3000
SESSION_MS = 5000
FETCH_WAIT_MS = 200
BROKERS = (4, 5, 6)
FETCH_VERSION = 17
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_CONFIGS = 32
ALTER_PARTITION_VERSION = 3
METRICS_PORT = free_port()  # broker 4's metrics endpoint (its ISR change counters)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = QuorumCluster(
        tmp_path_factory.mktemp("replication"), size=3, brokers=3, dedicated_controllers=True,
        overrides={"replica.lag.time.max.ms": str(LAG_MS),
                   "broker.session.timeout.ms": str(SESSION_MS),
                   "broker.heartbeat.interval.ms": "300",
                   "replica.fetch.backoff.ms": "200",
                   "replica.fetch.wait.max.ms": str(FETCH_WAIT_MS),
                   # Throttles are measured over 2 one-second windows, and fetches of 256 KB
                   # let a throttle act with that granularity (test_replication_throttle).
                   "replication.quota.window.num": "2",
                   "replica.fetch.max.bytes": str(256 * 1024)},
        node_overrides={4: {"metrics.prometheus.listener": f"http://{HOST}:{METRICS_PORT}"}})
    cluster.format()
    cluster.start()
    try:
        cluster.wait_for_leader(START_TIMEOUT_S)
        wait_for_metrics(metrics_url(METRICS_PORT), START_TIMEOUT_S)
        wait_until(lambda: live_brokers(cluster) == set(BROKERS), START_TIMEOUT_S,
                   interval=0.2, message="three unfenced brokers")
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_all()


def any_broker(cluster: QuorumCluster) -> int:
    return next(b for b in BROKERS if cluster.nodes[b].running and answers(cluster, b))


def answers(cluster: QuorumCluster, broker: int) -> bool:
    return cluster.nodes[broker].metadata(topics=[]) is not None


def live_brokers(cluster: QuorumCluster) -> set[int] | None:
    response = cluster.nodes[4].metadata(topics=[])
    return None if response is None else {b.node_id for b in response.brokers}


def state(cluster: QuorumCluster, topic: str, asked: int | None = None) -> tuple | None:
    """(leader, leader epoch, sorted ISR) of partition 0 as a broker reports it."""
    response = cluster.nodes[asked or any_broker(cluster)].metadata(topics=[topic])
    if response is None or response.topics[0].error_code != 0:
        return None
    p = response.topics[0].partitions[0]
    return p.leader_id, p.leader_epoch, sorted(p.isr_nodes)


def topic_id(cluster: QuorumCluster, topic: str) -> object:
    response = cluster.nodes[any_broker(cluster)].metadata(topics=[topic])
    return response.topics[0].topic_id


def create(cluster: QuorumCluster, topic: str, replicas: list[int], **configs: str) -> None:
    error = cluster.nodes[4].create_topic(topic, assignments={0: replicas},
                                          configs={k.replace("_", "."): v
                                                   for k, v in configs.items()})
    assert error == ErrorCode.NONE, error
    wait_until(lambda: state(cluster, topic) == (replicas[0], 0, sorted(replicas)), SETTLE_S,
               interval=0.1, message=f"{topic} led by {replicas[0]} with a full ISR")


def produce(cluster: QuorumCluster, broker: int, topic: str, values: list[bytes],
            acks: int) -> tuple[int, int]:
    """One batch to `broker`; (error code, base offset)."""
    batch = build_batch([(int(time.time() * 1000), None, v) for v in values])
    with RawClient(HOST, cluster.nodes[broker].port) as client:
        response = client.call(0, 9, produce_request(topic, 0, batch, acks=acks))
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def partitions_led_by_4_with_6(cluster: QuorumCluster, in_isr: bool) -> int:
    """Partitions broker 4 leads that have 6 as a replica, in their ISR or out of it (as
    broker 4's metadata says)."""
    response = cluster.nodes[4].metadata()
    return sum(1 for topic in response.topics for p in topic.partitions
               if p.leader_id == 4 and 6 in p.replica_nodes and (6 in p.isr_nodes) == in_isr)


def isr_changes(broker: int) -> tuple[float, ...]:
    """(shrinks, expands, failed updates) counted by a broker's ReplicaManager meters."""
    assert broker == 4  # the one with a metrics endpoint
    samples = scrape_metrics(metrics_url(METRICS_PORT))
    return tuple(samples[(f"kafka_server_replicamanager_{name}_total", frozenset())]
                 for name in ("isrshrinks", "isrexpands", "failedisrupdates"))


def replica_records(cluster: QuorumCluster, broker: int, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a replica's segment files, in offset order."""
    directory = Path(cluster.nodes[broker].workdir) / "data" / f"{topic}-0"
    out: list[tuple[int, bytes]] = []
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        for pos, header in iter_batches(data):
            out.extend((r[0], r[3]) for r in decode_records(data, pos, header))
    return out


def replicas_agree(cluster: QuorumCluster, brokers: tuple[int, ...], topic: str,
                   count: int) -> bool:
    logs = [replica_records(cluster, b, topic) for b in brokers]
    return len(logs[0]) == count and all(log == logs[0] for log in logs)


def test_acks_all_writes_reach_every_replica_with_the_leaders_offsets(cluster):
    create(cluster, "replicated", [4, 5, 6], min_insync_replicas="2")
    expected = []
    for batch in range(10):
        values = [f"r{batch}-{i}".encode() for i in range(50)]
        error, base = produce(cluster, 4, "replicated", values, acks=-1)
        assert (error, base) == (ErrorCode.NONE, batch * 50)
        expected += list(enumerate(values, start=base))
    # acks=all was answered once the ISR had it; the followers' files hold the same records
    # at the same offsets.
    for broker in BROKERS:
        wait_until(lambda b=broker: replica_records(cluster, b, "replicated") == expected,
                   SETTLE_S, interval=0.1, message=f"broker {broker} to hold every record")


def test_min_insync_replicas_and_a_paused_follower_catching_up(cluster):
    create(cluster, "min-isr", [4, 5, 6], min_insync_replicas="3")
    assert produce(cluster, 4, "min-isr", [b"before"], acks=-1) == (ErrorCode.NONE, 0)
    before = isr_changes(4)
    in_sync_before = partitions_led_by_4_with_6(cluster, in_isr=True)
    follower = cluster.nodes[6]
    follower.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        wait_until(lambda: state(cluster, "min-isr", 4) == (4, 0, [4, 5]), SETTLE_S,
                   interval=0.1, message="the paused follower out of the ISR")
        # Below min.insync.replicas: acks=all is refused before the append, acks=1 is not.
        assert produce(cluster, 4, "min-isr", [b"refused"], acks=-1)[0] == \
            ErrorCode.NOT_ENOUGH_REPLICAS
        big = b"x" * 10_000
        for batch in range(100):  # 1 MB the follower misses
            assert produce(cluster, 4, "min-isr", [big] * 10, acks=1)[0] == ErrorCode.NONE
        # Fenced for its missed heartbeats, 6 leaves every ISR: each of 4's partitions with 6
        # then expands once when it is back.
        wait_until(lambda: partitions_led_by_4_with_6(cluster, in_isr=True) == 0, SETTLE_S,
                   interval=0.1, message="6 fenced out of every ISR")
        out_of_sync = partitions_led_by_4_with_6(cluster, in_isr=False)
    finally:
        follower.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    # It catches up and joins the ISR again; acks=all works again.
    wait_until(lambda: state(cluster, "min-isr", 4)[2] == [4, 5, 6], SETTLE_S, interval=0.1,
               message="the follower back in the ISR")
    # Broker 4's IsrExpandsPerSec: one expansion of each partition it leads with 6.
    # IsrShrinksPerSec counts the leader's own shrinks only -- whether 4's or the
    # controller's fencing comes first is a race here; tests/server/test_replica_manager.py
    # counts them exactly.
    assert out_of_sync >= 1
    wait_until(lambda: isr_changes(4)[1] - before[1] >= out_of_sync, SETTLE_S, interval=0.1,
               message="every expansion counted")
    shrinks, expands, _failed = (now - then for now, then in zip(isr_changes(4), before,
                                                                  strict=True))
    assert expands == out_of_sync and 0 <= shrinks <= in_sync_before
    assert produce(cluster, 4, "min-isr", [b"after"], acks=-1) == (ErrorCode.NONE, 1001)
    wait_until(lambda: replicas_agree(cluster, BROKERS, "min-isr", 1002), SETTLE_S,
               interval=0.2, message="three identical replicas")
    assert b"refused" not in {value for _, value in replica_records(cluster, 4, "min-isr")}


def test_a_returning_old_leader_truncates_its_divergent_tail(cluster):
    create(cluster, "diverge", [4, 5, 6], min_insync_replicas="1")
    old_leader = cluster.nodes[4]
    assert produce(cluster, 4, "diverge", [b"a0", b"a1", b"a2"], acks=-1) == (ErrorCode.NONE, 0)
    wait_until(lambda: replicas_agree(cluster, BROKERS, "diverge", 3), SETTLE_S, interval=0.1,
               message="every replica with the first batch")
    # The followers pause; the leader appends a batch only it has (acks=1), then dies. A
    # paused follower's fetch already parked at the leader would still carry the batch into
    # its socket buffer: let the parked fetches expire first (a protocol timeout, so a
    # sleep), well within replica.lag.time.max.ms so the ISR stays whole.
    for broker in (5, 6):
        cluster.nodes[broker].proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        time.sleep(3 * FETCH_WAIT_MS / 1000)
        assert produce(cluster, 4, "diverge", [b"b3", b"b4"], acks=1) == (ErrorCode.NONE, 3)
        old_leader.kill()
    finally:
        for broker in (5, 6):
            cluster.nodes[broker].proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    assert [v for _, v in replica_records(cluster, 4, "diverge")] == \
        [b"a0", b"a1", b"a2", b"b3", b"b4"]
    # Once the controller fences it, a follower leads in a new epoch and takes new writes at
    # the offsets the lost batch had.
    new_state = wait_until(lambda: (s := state(cluster, "diverge", 5)) and s[0] in (5, 6)
                           and s, SETTLE_S, interval=0.1, message="a new leader")
    new_leader, epoch, _isr = new_state
    assert epoch >= 1
    assert produce(cluster, new_leader, "diverge", [b"c3", b"c4", b"c5"], acks=-1) == \
        (ErrorCode.NONE, 3)
    old_leader.start()
    wait_until(lambda: (s := state(cluster, "diverge", new_leader)) and 4 in s[2], SETTLE_S * 2,
               interval=0.2, message="the old leader back in the ISR")
    expected = [(0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"c3"), (4, b"c4"), (5, b"c5")]
    wait_until(lambda: all(replica_records(cluster, b, "diverge") == expected for b in BROKERS),
               SETTLE_S, interval=0.2, message="every replica with the new leader's log")


def _registered_epoch(cluster: QuorumCluster, broker: int) -> int:
    """The broker epoch the controller gave this broker (its log says)."""
    text = cluster.nodes[broker].log_path.read_text(errors="replace")
    return int(re.findall(r"registered with the controller at epoch (\d+)", text)[-1])


def _replica_fetch(cluster: QuorumCluster, leader: int, tid: object, replica: int,
                   current_leader_epoch: int) -> m.FetchResponse:
    request = m.FetchRequest(
        replica_state=m.FetchRequest.ReplicaState(replica_id=replica, replica_epoch=-1),
        max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[m.FetchRequest.FetchTopic(topic_id=tid, partitions=[
            m.FetchRequest.FetchPartition(partition=0, current_leader_epoch=current_leader_epoch,
                                          fetch_offset=0, last_fetched_epoch=-1,
                                          log_start_offset=0, partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id="")
    return send_request(cluster.nodes[leader].port, 1, FETCH_VERSION, request)


def _alter_partition(cluster: QuorumCluster, tid: object, broker: int, broker_epoch: int,
                     leader_epoch: int, partition_epoch: int, isr: list[int]):
    Req = m.AlterPartitionRequest
    request = Req(broker_id=broker, broker_epoch=broker_epoch, topics=[Req.TopicData(
        topic_id=tid, partitions=[Req.PartitionData(
            partition_index=0, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
            leader_recovery_state=0,
            new_isr_with_epochs=[Req.BrokerState(broker_id=b, broker_epoch=-1) for b in isr])])])
    leader_id, _epoch = cluster.wait_for_leader(SETTLE_S)
    return send_request(cluster.nodes[leader_id].controller_port, 56, ALTER_PARTITION_VERSION,
                        request)


def test_bad_replication_requests_get_kafkas_errors_and_change_nothing(cluster):
    create(cluster, "bad-input", [4, 5], min_insync_replicas="1")
    assert produce(cluster, 4, "bad-input", [b"v0", b"v1"], acks=-1) == (ErrorCode.NONE, 0)
    tid = topic_id(cluster, "bad-input")
    broker_epoch = _registered_epoch(cluster, 4)
    # Setup: move the partition epoch past 0 the way a leader does (its ISR shrinks to
    # itself, then its caught-up follower is added back). The follower is paused meanwhile,
    # so the shrink is seen everywhere before the leader can undo it.
    follower = cluster.nodes[5]
    follower.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        response = _alter_partition(cluster, tid, 4, broker_epoch, 0, 0, [4])
        part = response.topics[0].partitions[0]
        assert (part.error_code, part.isr, part.partition_epoch) == (ErrorCode.NONE, [4], 1)
        for broker in (4, 6):
            wait_until(lambda b=broker: state(cluster, "bad-input", b) == (4, 0, [4]),
                       SETTLE_S, interval=0.05, message=f"broker {broker} to see the shrink")
    finally:
        follower.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    for broker in (4, 5, 6):
        wait_until(lambda b=broker: state(cluster, "bad-input", b) == (4, 0, [4, 5]), SETTLE_S,
                   interval=0.1, message=f"broker {broker} to see the follower added back")
    before = state(cluster, "bad-input", 4)

    # Fetch from a broker that is not a replica: UNKNOWN_LEADER_EPOCH when it names the
    # epoch, else NOT_LEADER_OR_FOLLOWER (Kafka's followerReplicaOrThrow); no records.
    for epoch, error in ((0, ErrorCode.UNKNOWN_LEADER_EPOCH),
                         (-1, ErrorCode.NOT_LEADER_OR_FOLLOWER)):
        part = _replica_fetch(cluster, 4, tid, 6, epoch).responses[0].partitions[0]
        assert (part.error_code, bytes(part.records or b"")) == (error, b"")
    # A replica naming an epoch the leader does not have yet: UNKNOWN_LEADER_EPOCH.
    part = _replica_fetch(cluster, 4, tid, 5, 7).responses[0].partitions[0]
    assert part.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    # AlterPartition: a stale broker epoch, a stale partition epoch, a stale leader epoch, a
    # sender that is not the leader, an ISR member that is not a replica.
    response = _alter_partition(cluster, tid, 4, broker_epoch - 1, 0, 0, [4])
    assert response.error_code == ErrorCode.STALE_BROKER_EPOCH
    for sender, leader_epoch, partition_epoch, isr, error in (
            (4, 0, 0, [4], ErrorCode.INVALID_UPDATE_VERSION),
            (5, 0, 2, [5], ErrorCode.INVALID_REQUEST),
            (4, 0, 2, [4, 6], ErrorCode.INVALID_REQUEST)):
        response = _alter_partition(cluster, tid, sender, _registered_epoch(cluster, sender),
                                    leader_epoch, partition_epoch, isr)
        assert response.topics[0].partitions[0].error_code == error, (sender, isr)
    # Nothing changed: the same leader, epoch and ISR everywhere; the data intact.
    for broker in (4, 5, 6):
        assert state(cluster, "bad-input", broker) == before
    wait_until(lambda: replicas_agree(cluster, (4, 5), "bad-input", 2), SETTLE_S, interval=0.1,
               message="both replicas with the two records")


def test_a_follower_names_the_new_leader_in_its_answers(cluster):
    """KIP-951: NOT_LEADER_OR_FOLLOWER comes with the current leader, its epoch and its
    address (Produce v10+, Fetch v16+), so clients move without a metadata round trip."""
    create(cluster, "hints", [4, 5], min_insync_replicas="1")
    tid = topic_id(cluster, "hints")
    leader = cluster.nodes[4]
    batch = build_batch([(int(time.time() * 1000), None, b"v")])
    with RawClient(HOST, cluster.nodes[5].port) as client:
        response = client.call(0, 10, produce_request("hints", 0, batch, acks=1))
        answer = response.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (4, 0)
        assert [(e.node_id, e.host, e.port) for e in response.node_endpoints] == \
            [(4, HOST, leader.port)]
        fetch = m.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0,
            session_epoch=-1, topics=[m.FetchRequest.FetchTopic(topic_id=tid, partitions=[
                m.FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                              current_leader_epoch=-1, last_fetched_epoch=-1,
                                              log_start_offset=-1,
                                              partition_max_bytes=1 << 20)])])
    # Fetch v11+ from a consumer is served by a follower too (KIP-392): broker 6, which
    # holds no replica, answers NOT_LEADER_OR_FOLLOWER.
    with RawClient(HOST, cluster.nodes[6].port) as client:
        response = client.call(1, 16, fetch)
        part = response.responses[0].partitions[0]
        assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (4, 0)
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [(4, leader.port)]
    assert produce(cluster, 4, "hints", [b"v"], acks=1) == (ErrorCode.NONE, 0)


def alter_configs(cluster: QuorumCluster, changes: list[tuple[int, str, str, str | None]]
                  ) -> None:
    """IncrementalAlterConfigs: (resource type, name, key, value: None deletes)."""
    R = m.IncrementalAlterConfigsRequest
    resources = [R.AlterConfigsResource(
        resource_type=kind, resource_name=name,
        configs=[R.AlterableConfig(name=key, config_operation=0 if value is not None else 1,
                                   value=value)])
        for kind, name, key, value in changes]
    response = send_request(cluster.nodes[any_broker(cluster)].port, INCREMENTAL_ALTER_CONFIGS,
                            1, R(resources=resources, validate_only=False))
    assert {r.error_code for r in response.responses} == {ErrorCode.NONE.code}


def configs_seen(cluster: QuorumCluster, broker: int,
                 wanted: list[tuple[int, str, str, str | None]]) -> bool:
    """Whether `broker`'s metadata image has these configs (DescribeConfigs on it)."""
    R = m.DescribeConfigsRequest
    response = send_request(cluster.nodes[broker].port, DESCRIBE_CONFIGS, 4, R(
        resources=[R.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                             configuration_keys=[key])
                   for kind, name, key, _ in wanted],
        include_synonyms=False, include_documentation=False))
    for (_kind, _name, _key, value), result in zip(wanted, response.results):
        dynamic = [c.value for c in result.configs if c.config_source in (1, 2)]
        if (dynamic[0] if dynamic else None) != value:
            return False
    return True


THROTTLE_BYTES_PER_S = 512 * 1024
MISSED_BYTES = 4 << 20


@pytest.mark.parametrize("side", ["none", "follower", "leader"])
def test_replication_throttle_holds_a_catching_up_replica_to_the_rate(cluster, side):
    """A follower that missed 4 MB catches up: at once unthrottled; at about
    leader/follower.replication.throttled.rate when that side throttles the partition."""
    topic = f"throttled-{side}"
    create(cluster, topic, [4, 5])
    throttled_broker = {"follower": 5, "leader": 4}.get(side)
    throttles: list[tuple[int, str, str, str | None]] = []
    if throttled_broker is not None:
        throttles = [
            (RESOURCE_BROKER, str(throttled_broker), f"{side}.replication.throttled.rate",
             str(THROTTLE_BYTES_PER_S)),
            (RESOURCE_TOPIC, topic, f"{side}.replication.throttled.replicas",
             f"0:{throttled_broker}")]
        alter_configs(cluster, throttles)
        wait_until(lambda: configs_seen(cluster, throttled_broker, throttles), SETTLE_S,
                   interval=0.1, message=f"broker {throttled_broker} sees the throttle")
    follower = cluster.nodes[5]
    try:
        follower.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            wait_until(lambda: state(cluster, topic, 4) == (4, 0, [4]), SETTLE_S,
                       interval=0.1, message="the paused follower out of the ISR")
            value = b"t" * 1000
            for _ in range(MISSED_BYTES // (256 * len(value))):  # 256 KB batches
                assert produce(cluster, 4, topic, [value] * 256, acks=1)[0] == ErrorCode.NONE
        finally:
            follower.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        resumed = time.monotonic()
        wait_until(lambda: state(cluster, topic, 4)[2] == [4, 5], 60, interval=0.05,
                   message="the follower back in the ISR")
        caught_up_s = time.monotonic() - resumed
    finally:
        if throttles:
            alter_configs(cluster, [(kind, name, key, None)
                                    for kind, name, key, _ in throttles])
    rate = MISSED_BYTES / caught_up_s
    print(f"\nthrottle {side}: {MISSED_BYTES} bytes caught up in {caught_up_s:.2f} s "
          f"({rate / 1024:.0f} KB/s; bound {THROTTLE_BYTES_PER_S // 1024} KB/s)")
    if side == "none":
        assert rate > 4 * THROTTLE_BYTES_PER_S
    else:
        # Kafka's measure pads to (samples - 1) windows: about one second of the bound may pass
        # at once, then the bound holds; a third slack for scheduling on a shared machine.
        assert rate < 1.5 * THROTTLE_BYTES_PER_S * MISSED_BYTES / (
            MISSED_BYTES - THROTTLE_BYTES_PER_S)
        assert rate > THROTTLE_BYTES_PER_S / 3
