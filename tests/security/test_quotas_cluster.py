"""Client quotas in a two-node cluster: AlterClientQuotas sent to the node that is not the
active controller is forwarded to it, and every broker follows the quota (describes it and
throttles by it) once the record is replayed."""

from __future__ import annotations

import time

from cluster.quorum_cluster import HOST, QuorumCluster, send_request

from odradek.protocol import messages as m
from odradek.protocol.records import build_batch
from tests.broker_process import wait_until

A = m.AlterClientQuotasRequest
D = m.DescribeClientQuotasRequest


def test_alter_on_any_node_reaches_every_broker(tmp_path):
    cluster = QuorumCluster(tmp_path / "cluster", size=2)
    cluster.format()
    cluster.start()
    try:
        leader, _epoch = cluster.wait_for_leader(60)
        follower = next(n for n in cluster.nodes.values() if n.node_id != leader)

        def registered() -> bool:
            for node in cluster.nodes.values():
                node.check_alive()
            metadata = follower.metadata()
            return metadata is not None and len(metadata.brokers) == 2
        wait_until(registered, 60, interval=0.2, message="both brokers registered")

        # The client id the cluster helper's requests use: its produce gets throttled.
        response = send_request(follower.port, 49, 1, A(entries=[A.EntryData(
            entity=[A.EntityData(entity_type="client-id", entity_name="cluster-test")],
            ops=[A.OpData(key="producer_byte_rate", value=1000.0)])]))
        assert [e.error_code for e in response.entries] == [0]

        def described_everywhere() -> bool:
            for node in cluster.nodes.values():
                described = send_request(node.port, 48, 1, D(components=[D.ComponentData(
                    entity_type="client-id", match_type=0, match="cluster-test")]))
                if [[(v.key, v.value) for v in entry.values] for entry in described.entries] \
                        != [[("producer_byte_rate", 1000.0)]]:
                    return False
            return True
        wait_until(described_everywhere, 30, interval=0.2,
                   message="the quota described by both nodes")

        assert follower.create_topic("quota-cluster", partitions=2, replication_factor=1) == 0
        batch = build_batch([(int(time.time() * 1000), None, b"z" * 1000)] * 50)
        for node in cluster.nodes.values():
            topic_metadata = node.metadata(["quota-cluster"])
            led = [p.partition_index for p in topic_metadata.topics[0].partitions
                   if p.leader_id == node.node_id]
            assert led, "each node leads one partition of the two"

            def throttled(node=node, partition=led[0]) -> bool:
                answer = send_request(node.port, 0, 9, m.ProduceRequest(
                    acks=1, timeout_ms=5000, topic_data=[m.ProduceRequest.TopicProduceData(
                        name="quota-cluster", partition_data=[
                            m.ProduceRequest.PartitionProduceData(index=partition,
                                                                  records=batch)])]),
                    host=HOST)
                assert answer.responses[0].partition_responses[0].error_code == 0
                return answer.throttle_time_ms > 0
            wait_until(throttled, 30, interval=0, message=f"node {node.node_id} to throttle")
    finally:
        cluster.stop()
