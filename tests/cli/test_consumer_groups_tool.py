"""`odradek consumer-groups` against a real broker: list, describe, reset offsets (verified by
consuming afterwards), delete offsets, delete groups, and Kafka's usage errors."""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP

sys.path.insert(0, str(Path(__file__).parent.parent / "compat"))

from broker_process import BrokerProcess
from group_members import (
    OdradekMember,
    ThreadMember,
    consumer_config,
    group_shape,
    wait_for,
)

from odradek.cli import consumer_groups
from odradek.cli.consumer_groups import (
    java_hashmap_order,
    parse_datetime_ms,
    parse_duration_ms,
    topic_partition_hashcode,
)
from odradek.client import Admin, KafkaError, NewTopic, TopicPartition
from odradek.protocol.errors import ErrorCode

MINUTE_MS = 60_000
RECORDS = 10  # per partition


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("cg-tool"),
                           overrides={"offsets.topic.num.partitions": "4"}).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def admin(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        yield admin


@pytest.fixture(scope="module")
def topic(broker, admin):
    """Two partitions of 10 records; record i was written (10 - i) * 10 minutes ago."""
    name = f"cg-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    now = int(time.time() * 1000)
    for partition in range(2):
        for i in range(RECORDS):
            producer.produce(name, value=f"{partition}-{i}".encode(), partition=partition,
                             timestamp=now - (RECORDS - i) * 10 * MINUTE_MS)
    assert producer.flush(30) == 0
    return name


def tool(broker, capsys, *args: str) -> tuple[int, str, str]:
    code = consumer_groups.main(["--bootstrap-server", broker.bootstrap, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def next_offsets(broker, group: str, topic: str) -> dict[int, int]:
    """Consumes from the group's committed offsets: the offset of the first record read in
    each partition."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "latest"})
    consumer.assign([CTP(topic, p) for p in range(2)])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 15
    try:
        while len(first) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                first.setdefault(message.partition(), message.offset())
    finally:
        consumer.close()
    return first


def reset(broker, capsys, group: str, *args: str) -> tuple[int, str, str]:
    return tool(broker, capsys, "--reset-offsets", "--group", group, *args)


# ------------------------------------------------------------------------------------------


def test_usage_errors(broker, capsys):
    assert consumer_groups.main([]) == 1
    assert "List all consumer groups" in capsys.readouterr().err
    code, _, err = tool(broker, capsys, "--list", "--describe")
    assert code == 1 and err.startswith("Command must include exactly one action: --list, "
                                        "--describe, --delete, --reset-offsets, "
                                        "--delete-offsets")
    assert "--bootstrap-server <String: server to" in err  # the option table follows
    code, _, err = tool(broker, capsys, "--describe")
    assert code == 1 and "Option --describe takes one of these options: --group, " \
                         "--all-groups" in err
    code, _, err = tool(broker, capsys, "--describe", "--group", "g", "--state", "stable")
    assert code == 1 and "Option --describe does not take a value for --state" in err
    code, _, err = tool(broker, capsys, "--reset-offsets", "--group", "g", "--dry-run",
                        "--execute", "--to-earliest")
    assert code == 1 and "only accepts one of --execute and --dry-run" in err
    code, _, err = tool(broker, capsys, "--reset-offsets", "--group", "g", "--to-earliest",
                        "--to-latest", "--all-topics")
    assert code == 1 and "can't be used with option" in err
    code, _, err = tool(broker, capsys, "--describe", "--group", "g", "--members", "--state")
    assert code == 1 and "takes at most one of these options" in err
    assert consumer_groups.main(["--help"]) == 0
    assert "reset consumer group offsets" in capsys.readouterr().out


def test_describe_and_list_a_live_group(broker, admin, topic, capsys):
    group = f"live-{uuid.uuid4().hex[:6]}"
    consumed: list[tuple[int, int]] = []
    member = ThreadMember(consumer_config(broker.bootstrap, group, **{"client.id": "cli-test"}),
                          [topic], consumed, threading.Lock())
    member.start()
    try:
        wait_for(lambda: group_shape(admin, group) == ("Stable", [2]), 30, "a stable group")
        wait_for(lambda: len(consumed) >= 2 * RECORDS, 30, "all records consumed")
        member_id = admin.describe_groups([group])[group].members[0].member_id

        code, out, err = tool(broker, capsys, "--describe", "--group", group)
        assert code == 0 and err == ""
        width = len(member_id)
        header = (f"{'GROUP':<15} {'TOPIC':<15} {'PARTITION':<10} {'CURRENT-OFFSET':<15} "
                  f"{'LOG-END-OFFSET':<15} {'LAG':<15} {'CONSUMER-ID':<{width}} "
                  f"{'HOST':<15} CLIENT-ID")
        rows = {
            p: f"{group:<15} {topic:<15} {p:<10} {RECORDS:<15} {RECORDS:<15} {0:<15} "
               f"{member_id} {'/127.0.0.1':<15} cli-test"
            for p in range(2)}
        order = java_hashmap_order([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                   topic_partition_hashcode)
        assert out == "\n" + header + "".join("\n" + rows[tp.partition] for tp in order) \
            + "\n\n"

        # --offsets is the default sub-action: the same table.
        code, offsets_out, _ = tool(broker, capsys, "--describe", "--group", group, "--offsets")
        assert code == 0 and offsets_out == out

        code, out, _ = tool(broker, capsys, "--describe", "--group", group, "--members")
        header = (f"{'GROUP':<15} {'CONSUMER-ID':<{width}} {'HOST':<15} {'CLIENT-ID':<15} "
                  f"{'#PARTITIONS':<15} ")
        row = f"{group:<15} {member_id} {'/127.0.0.1':<15} {'cli-test':<15} {2:<15} "
        assert code == 0 and out == f"\n{header}\n{row}\n"

        code, out, _ = tool(broker, capsys, "--describe", "--group", group, "--members",
                            "--verbose")
        # Kafka 4.0's verbose columns (KIP-1099); a classic group has no epochs or targets.
        assigned = f"{topic}(0,1)"
        assignment_width = max(20, len(assigned))
        header = (f"{'GROUP':<15} {'CONSUMER-ID':<{width}} {'HOST':<15} {'CLIENT-ID':<15} "
                  f"{'#PARTITIONS':<15} {'CURRENT-EPOCH':<15} "
                  f"{'CURRENT-ASSIGNMENT':<{assignment_width}} {'TARGET-EPOCH':<15} "
                  "TARGET-ASSIGNMENT")
        row = (f"{group:<15} {member_id} {'/127.0.0.1':<15} {'cli-test':<15} {2:<15} "
               f"{'-':<15} {assigned:<{assignment_width}} {'-':<15} -")
        assert out.splitlines()[1:] == [header, row]

        code, out, _ = tool(broker, capsys, "--describe", "--group", group, "--state")
        coordinator = f"{broker.host}:{broker.port} (1)"
        assert out == (f"\n{'GROUP':<25} {'COORDINATOR (ID)':<25} {'ASSIGNMENT-STRATEGY':<20} "
                       f"{'STATE':<15} #MEMBERS"
                       f"\n{group:<25} {coordinator:<25} {'range':<20} {'Stable':<15} 1\n")

        code, out, _ = tool(broker, capsys, "--list")
        assert group in out.splitlines()
        code, out, _ = tool(broker, capsys, "--list", "--state", "stable")
        assert out.splitlines()[0] == f"{'GROUP':<25} {'STATE':<20}"
        assert f"{group:<25} {'Stable':<20}" in out.splitlines()
        code, out, _ = tool(broker, capsys, "--list", "--state", "empty")
        assert group not in out
        code, out, _ = tool(broker, capsys, "--list", "--type")
        assert f"{group:<25} {'Classic':<20}" in out.splitlines()

        # Offsets cannot be reset under a live consumer, nor the group deleted.
        code, out, err = reset(broker, capsys, group, "--all-topics", "--to-earliest",
                               "--execute")
        assert f"Error: Assignments can only be reset if the group '{group}' is inactive, " \
               "but the current state is Stable." in err
        code, out, err = tool(broker, capsys, "--delete", "--group", group)
        assert code == 1 and "GroupNotEmptyException" in out
    finally:
        member.stop()
    code, _, err = tool(broker, capsys, "--describe", "--group", group, "--members")
    assert f"Consumer group '{group}' has no active members." in err


def test_describe_members_shows_group_instance_ids_of_static_members(broker, admin, topic,
                                                                    capsys):
    group = f"static-{uuid.uuid4().hex[:6]}"
    config = consumer_config(broker.bootstrap, group, **{"client.id": "cli-static",
                                                         "group.instance.id": "instance-1"})
    member = ThreadMember(config, [topic], [], threading.Lock())
    member.start()
    try:
        wait_for(lambda: group_shape(admin, group) == ("Stable", [2]), 30, "a stable group")
        member_id = admin.describe_groups([group])[group].members[0].member_id
        code, out, _ = tool(broker, capsys, "--describe", "--group", group, "--members",
                            "--verbose")
        width = len(member_id)
        assigned = f"{topic}(0,1)"
        assignment_width = max(20, len(assigned))
        header = (f"{'GROUP':<15} {'CONSUMER-ID':<{width}} {'GROUP-INSTANCE-ID':<17} "
                  f"{'HOST':<15} {'CLIENT-ID':<15} {'#PARTITIONS':<15} {'CURRENT-EPOCH':<15} "
                  f"{'CURRENT-ASSIGNMENT':<{assignment_width}} {'TARGET-EPOCH':<15} "
                  "TARGET-ASSIGNMENT")
        row = (f"{group:<15} {member_id} {'instance-1':<17} {'/127.0.0.1':<15} "
               f"{'cli-static':<15} {2:<15} {'-':<15} {assigned:<{assignment_width}} "
               f"{'-':<15} -")
        assert code == 0 and out.splitlines()[1:] == [header, row]
    finally:
        member.stop()
    # A static member sends no LeaveGroup: it stays until its session times out.
    assert group_shape(admin, group) == ("Stable", [2])


def test_reset_offsets_scenarios_verified_by_consuming(broker, admin, topic, capsys):
    group = f"reset-{uuid.uuid4().hex[:6]}"
    # Dry run (the default, with a warning): shows the plan, changes nothing.
    code, out, err = reset(broker, capsys, group, "--topic", topic, "--to-offset", "4")
    assert code == 0 and "WARN: No action will be performed" in err
    lines = out.splitlines()
    assert lines[1] == f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<15}"
    assert sorted(lines[2:]) == sorted(f"{group:<30} {topic:<30} {p:<10} {4:<15}"
                                       for p in range(2))
    assert admin.list_consumer_group_offsets(group) == {}
    # --to-current of partitions without a committed offset: the log end.
    code, out, _ = reset(broker, capsys, group, "--topic", topic, "--to-current", "--dry-run")
    assert code == 0 and sorted(out.splitlines()[2:]) == sorted(
        f"{group:<30} {topic:<30} {p:<10} {RECORDS:<15}" for p in range(2))
    assert admin.list_consumer_group_offsets(group) == {}

    def execute(*args: str) -> dict[int, int]:
        code, _, err = reset(broker, capsys, group, *args, "--execute")
        assert code == 0, err
        return next_offsets(broker, group, topic)

    assert execute("--topic", topic, "--to-offset", "4") == {0: 4, 1: 4}
    # Beyond the log end: clamped to it (nothing left to consume there).
    code, _, _ = reset(broker, capsys, group, "--topic", f"{topic}:1", "--to-offset", "99",
                       "--execute")
    offsets = admin.list_consumer_group_offsets(group)
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {0: 4, 1: RECORDS}
    assert execute("--all-topics", "--shift-by", "-3") == {0: 1, 1: 7}
    assert execute("--topic", topic, "--to-earliest") == {0: 0, 1: 0}
    # Record i was written (10 - i) * 10 minutes ago.
    assert execute("--topic", topic, "--by-duration", "PT35M") == {0: 7, 1: 7}
    moment = dt.datetime.fromtimestamp(time.time() - 55 * 60, dt.UTC)
    assert execute("--topic", topic, "--to-datetime",
                   moment.strftime("%Y-%m-%dT%H:%M:%S.000")) == {0: 5, 1: 5}
    assert execute("--topic", topic, "--to-current") == {0: 5, 1: 5}

    code, exported, _ = reset(broker, capsys, group, "--topic", topic, "--shift-by", "2",
                              "--dry-run", "--export")
    assert sorted(exported.split()) == [f"{topic},0,7", f"{topic},1,7"]
    plan = Path(broker.workdir) / "plan.csv"
    plan.write_text(f"{topic},0,8\n{topic},1,3\n")
    assert execute("--from-file", str(plan)) == {0: 8, 1: 3}
    # --execute with --export: applied, and the plan printed as CSV.
    code, exported, _ = reset(broker, capsys, group, "--topic", topic, "--shift-by", "-1",
                              "--execute", "--export")
    assert code == 0 and sorted(exported.split()) == [f"{topic},0,7", f"{topic},1,2"]
    assert next_offsets(broker, group, topic) == {0: 7, 1: 2}

    code, _, _ = reset(broker, capsys, group, "--topic", topic, "--to-latest", "--execute")
    offsets = admin.list_consumer_group_offsets(group)
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {0: RECORDS, 1: RECORDS}

    code, out, err = tool(broker, capsys, "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in err
    rows = [line.split() for line in out.splitlines()[2:] if line.strip()]
    assert len(rows) == 2 and all(row[5] == "0" and row[6] == "-" for row in rows)
    # Consuming after --to-latest starts with the records written after the reset.
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition in range(2):
        producer.produce(topic, value=b"after-reset", partition=partition)
    assert producer.flush(30) == 0
    assert next_offsets(broker, group, topic) == {0: RECORDS, 1: RECORDS}


def test_delete_offsets_and_delete_groups(broker, admin, topic, capsys):
    group = f"del-{uuid.uuid4().hex[:6]}"
    admin.alter_consumer_group_offsets(group, {(topic, 0): 1, (topic, 1): 2})
    code, out, err = tool(broker, capsys, "--delete-offsets", "--group", group, "--topic",
                          f"{topic}:0")
    assert code == 0 and err == ""
    assert out.splitlines() == [
        f"Request succeed for deleting offsets with topic {topic}:0 group {group}", "",
        f"{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}",
        f"{topic:<30} {0:<15} {'Successful':<15}"]
    offsets = admin.list_consumer_group_offsets(group)
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {1: 2}

    code, out, err = tool(broker, capsys, "--delete-offsets", "--group", "no-such-group",
                          "--topic", topic)
    assert code == 1 and "Error: 'no-such-group' does not exist." in err

    code, out, _ = tool(broker, capsys, "--delete", "--group", group)
    assert code == 0 and out == f"Deletion of requested consumer groups ('{group}') was " \
                                "successful.\n"
    assert admin.list_consumer_group_offsets(group) == {}
    code, out, err = tool(broker, capsys, "--delete", "--group", group)
    assert code == 1 and "Error: Deletion of some consumer groups failed:" in err
    assert f"* Group '{group}' could not be deleted due to: java.util.concurrent." \
           "ExecutionException: org.apache.kafka.common.errors.GroupIdNotFoundException: " \
           "The group id does not exist." in out

def test_a_group_that_does_not_exist(broker, admin, topic, capsys):
    """Kafka 4.0's admin fails a missing group with GroupIdNotFoundException (DescribeGroups
    v6, "Group G not found."); kafka-consumer-groups.sh --describe reports that failure, and
    --reset-offsets resets the group as an inactive one."""
    group = f"missing-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaError) as raised:
        admin.describe_groups([group])
    assert (raised.value.code, raised.value.message) == (
        ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} not found.")
    failed = admin.describe_groups([group], raise_errors=False)[group]
    assert isinstance(failed, KafkaError) and failed.code == ErrorCode.GROUP_ID_NOT_FOUND
    for describe in ([], ["--members"], ["--state"], ["--offsets"]):
        code, out, err = tool(broker, capsys, "--describe", "--group", group, *describe)
        assert (code, out) == (1, "")
        assert err == ("\nError: Executing consumer group command failed due to "
                       "org.apache.kafka.common.errors.GroupIdNotFoundException: "
                       f"Group {group} not found.\n")
    code, out, err = reset(broker, capsys, group, "--topic", f"{topic}:0", "--to-offset", "1",
                           "--execute")
    assert code == 0 and err == ""
    assert {tp.partition: o.offset
            for tp, o in admin.list_consumer_group_offsets(group).items()} == {0: 1}


def test_duration_and_datetime_parsing():
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_duration_ms("P1DT2H3M4.5S") == ((26 * 60 + 3) * 60 + 4) * 1000 + 500
    assert parse_duration_ms("-PT10M") == -600_000
    assert parse_datetime_ms("1970-01-01T00:00:01.250") == 1250
    assert parse_datetime_ms("1970-01-01T01:00:00+01:00") == 0
    assert parse_datetime_ms("1970-01-01T00:00:00Z") == 0
    with pytest.raises(consumer_groups.CommandError):
        parse_duration_ms("1 hour")
    with pytest.raises(consumer_groups.CommandError):
        parse_datetime_ms("yesterday")


def test_describe_consumer_protocol_group(broker, admin, topic, capsys):
    """A KIP-848 group as Kafka 4.0's tool shows it (ConsumerGroupDescribe): the server
    assignor as ASSIGNMENT-STRATEGY, the group and member epochs and target assignments with
    --verbose, type Consumer in --list --type."""
    group = f"kip848-{uuid.uuid4().hex[:6]}"
    member = OdradekMember(broker.bootstrap, group, topic, **{"client.id": "cli-848"})
    member.start()
    try:
        wait_for(lambda: len(member.owned) == 2, 30, "the member owns both partitions")
        described = admin.describe_groups([group])[group]
        assert described.type == "consumer" and described.protocol == "uniform"
        (info,) = described.members
        epoch = info.member_epoch
        assert epoch == described.group_epoch == described.target_assignment_epoch
        assigned = f"{topic}(0,1)"
        width, assignment_width = len(info.member_id), max(20, len(assigned))

        code, out, _ = tool(broker, capsys, "--describe", "--group", group, "--members",
                            "--verbose")
        header = (f"{'GROUP':<15} {'CONSUMER-ID':<{width}} {'HOST':<15} {'CLIENT-ID':<15} "
                  f"{'#PARTITIONS':<15} {'CURRENT-EPOCH':<15} "
                  f"{'CURRENT-ASSIGNMENT':<{assignment_width}} {'TARGET-EPOCH':<15} "
                  "TARGET-ASSIGNMENT")
        row = (f"{group:<15} {info.member_id} {'/127.0.0.1':<15} {'cli-848':<15} {2:<15} "
               f"{epoch:<15} {assigned:<{assignment_width}} {epoch:<15} {assigned}")
        assert code == 0 and out.splitlines()[1:] == [header, row]

        code, out, _ = tool(broker, capsys, "--describe", "--group", group, "--state",
                            "--verbose")
        coordinator = f"{broker.host}:{broker.port} (1)"
        assert out == (f"\n{'GROUP':<25} {'COORDINATOR (ID)':<25} {'ASSIGNMENT-STRATEGY':<20} "
                       f"{'STATE':<15} {'GROUP-EPOCH':<15} {'TARGET-ASSIGNMENT-EPOCH':<25} "
                       f"#MEMBERS\n{group:<25} {coordinator:<25} {'uniform':<20} "
                       f"{'Stable':<15} {epoch:<15} {epoch:<25} 1\n")

        code, out, _ = tool(broker, capsys, "--list", "--type")
        assert f"{group:<25} {'Consumer':<20}" in out.splitlines()
        code, out, _ = tool(broker, capsys, "--list", "--type", "consumer")
        assert group in out and "Classic" not in out
    finally:
        member.stop.set()
        member.join(30)
