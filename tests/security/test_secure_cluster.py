"""A two-node cluster whose nodes talk to each other only over secure listeners: brokers
replicate over a SASL_SSL (PLAIN) inter-broker listener, and reach the controllers (Raft,
registration, heartbeats, forwarding) over an SSL listener that requires client
certificates, or a SASL_PLAINTEXT one. Clients use a PLAINTEXT listener."""

from __future__ import annotations

import uuid

import pytest
from cluster.quorum_cluster import HOST, QuorumCluster

from tests.broker_process import free_port, wait_until
from tests.security.certs import TestCA


@pytest.fixture(params=["SSL", "SASL_PLAINTEXT"])
def secure_cluster(tmp_path, request):
    """The controller listener: SSL with required client certificates, or SASL_PLAINTEXT with
    PLAIN (sasl.mechanism.controller.protocol)."""
    controller_protocol = request.param
    ca = TestCA(tmp_path / "ca")
    cluster = QuorumCluster(tmp_path / "cluster", size=2)
    nodes = list(cluster.nodes.values())
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in nodes)
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="broker" password="broker-secret" user_broker="broker-secret";')
    for node in nodes:
        cert = ca.issue(f"node-{node.node_id}", server=True)
        internal = free_port()
        node.write_config(voters, {
            "listeners": f"PLAINTEXT://{HOST}:{node.port},INTERNAL://{HOST}:{internal},"
                         f"CONTROLLER://{HOST}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{node.port},"
                                    f"INTERNAL://{HOST}:{internal}",
            "listener.security.protocol.map":
                f"PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:{controller_protocol}",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": jaas,
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(cert.combined_path),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca.cert_path),
            "listener.name.controller.ssl.client.auth": "required",
            "offsets.topic.replication.factor": "2",
            "transaction.state.log.replication.factor": "2",
        })
    cluster.format()
    cluster.start()
    yield cluster
    cluster.stop()


def test_replication_and_controllers_over_secure_listeners(secure_cluster):
    from confluent_kafka import Consumer, Producer
    nodes = list(secure_cluster.nodes.values())

    def registered() -> bool:
        for node in nodes:
            node.check_alive()
        metadata = nodes[0].metadata()
        return metadata is not None and len(metadata.brokers) == 2

    # Registration and heartbeats reach the active controller over the SSL listener.
    wait_until(registered, 60, interval=0.2, message="both brokers registered")
    topic = f"replicated-{uuid.uuid4().hex[:8]}"
    assert nodes[0].create_topic(topic, partitions=2, replication_factor=2) == 0

    def fully_replicated() -> bool:
        metadata = nodes[1].metadata([topic])
        partitions = metadata.topics[0].partitions if metadata and metadata.topics else []
        return len(partitions) == 2 and all(len(p.isr_nodes) == 2 for p in partitions)

    wait_until(fully_replicated, 60, interval=0.2, message="both replicas in sync")
    bootstrap = ",".join(f"{HOST}:{node.port}" for node in nodes)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(50):
        producer.produce(topic, f"r{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0  # acks=all: the followers fetched over SASL_SSL
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values = set()
    try:
        def consumed() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.add(message.value())
            return len(values) == 50
        wait_until(consumed, 60, interval=0, message="all records consumed")
    finally:
        consumer.close()
    for node in nodes:
        log_text = node.log_path.read_text()
        assert "Failed authentication" not in log_text
        assert "broker-secret" not in log_text
