"""`odradek transactions` (kafka-transactions.sh) against a real broker, run in-process:
Kafka's tables (cells padded to the column width, each followed by a tab) and messages."""

from __future__ import annotations

import uuid

import pytest

from odradek.cli import transactions
from odradek.cli.transactions import pretty_print_table
from odradek.client import Admin, NewTopic, Producer, TopicPartition


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run_tool(capsys, *args: str) -> tuple[int, str, str]:
    code = transactions.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.split("\t")[:-1]]


def _table(out: str) -> list[dict[str, str]]:
    header, *rows = out.splitlines()
    names = _cells(header)
    return [dict(zip(names, _cells(row))) for row in rows]


@pytest.fixture
def open_transaction(odradek_broker):
    """A transactional producer with an open transaction holding one record at offset 0 of a
    new topic's partition 0."""
    topic, transactional_id = _name("tools"), _name("tid")
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap,
                         "transactional.id": transactional_id})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"v", partition=0).get(20)
    yield producer, topic, transactional_id
    producer.close(0)


def test_pretty_print_table_pads_every_cell_and_ends_it_with_a_tab(capsys):
    import sys

    pretty_print_table(["A", "Long"], [["value", "x"]], sys.stdout)
    assert capsys.readouterr().out == "A    \tLong\t\nvalue\tx   \t\n"


def test_describe_an_open_transaction(odradek_broker, open_transaction, capsys):
    _producer, topic, transactional_id = open_transaction
    code, out, err = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap,
                              "describe", "--transactional-id", transactional_id)
    assert code == 0, err
    assert _cells(out.splitlines()[0]) == transactions.DESCRIBE_HEADERS
    (row,) = _table(out)
    assert row["CoordinatorId"] == "1" and row["TransactionalId"] == transactional_id
    assert row["TransactionState"] == "Ongoing"
    assert row["TransactionTimeoutMs"] == "60000"
    assert int(row["TransactionDurationMs"]) >= 0
    assert row["TopicPartitions"] == f"{topic}-0"


def test_list_shows_each_transactional_id_with_its_coordinator(odradek_broker, open_transaction,
                                                               capsys):
    _producer, _topic, transactional_id = open_transaction
    code, out, err = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap, "list")
    assert code == 0, err
    assert _cells(out.splitlines()[0]) == transactions.LIST_HEADERS
    rows = [row for row in _table(out) if row["TransactionalId"] == transactional_id]
    assert len(rows) == 1
    assert rows[0]["Coordinator"] == "1" and rows[0]["TransactionState"] == "Ongoing"
    assert int(rows[0]["ProducerId"]) >= 0


def test_describe_producers_then_abort_by_start_offset(odradek_broker, open_transaction,
                                                       capsys):
    _producer, topic, _transactional_id = open_transaction
    base = ["--bootstrap-server", odradek_broker.bootstrap]
    code, out, err = run_tool(capsys, *base, "describe-producers", "--topic", topic,
                              "--partition", "0")
    assert code == 0, err
    assert _cells(out.splitlines()[0]) == transactions.DESCRIBE_PRODUCERS_HEADERS
    (row,) = _table(out)
    assert row["CurrentTransactionStartOffset"] == "0" and row["LastSequence"] == "0"
    code, out, err = run_tool(capsys, *base, "abort", "--topic", topic, "--partition", "0",
                              "--start-offset", "0")
    assert (code, out, err) == (0, "", "")
    code, out, err = run_tool(capsys, *base, "describe-producers", "--topic", topic,
                              "--partition", "0")
    (row,) = _table(out)
    assert row["CurrentTransactionStartOffset"] == "None"
    assert int(row["LatestCoordinatorEpoch"]) >= 0
    # The partition's last stable offset moved past the ABORT marker.
    tp = TopicPartition(topic, 0)
    from odradek.client import Consumer

    with Consumer({"bootstrap.servers": odradek_broker.bootstrap,
                   "isolation.level": "read_committed"}) as consumer:
        assert consumer.end_offsets([tp]) == {tp: 2}


def test_abort_errors(odradek_broker, capsys):
    base = ["--bootstrap-server", odradek_broker.bootstrap, "abort", "--topic", "t",
            "--partition", "0"]
    code, _out, err = run_tool(capsys, *base)
    assert code == 1
    assert err.strip() == ("The transaction to abort must be identified either with "
                           "--start-offset (for brokers on 3.0 or above) or with --producer-id, "
                           "--producer-epoch, and --coordinator-epoch (for older brokers)")
    code, _out, err = run_tool(capsys, *base, "--producer-id", "5")
    assert (code, err.strip()) == (1, "Missing required argument --producer-epoch")
    code, _out, err = run_tool(capsys, *base, "--producer-id", "5", "--producer-epoch", "0")
    assert (code, err.strip()) == (1, "Missing required argument --coordinator-epoch")


def test_abort_by_start_offset_without_such_a_transaction(odradek_broker, capsys):
    topic = _name("empty")
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    code, _out, err = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap, "abort",
                               "--topic", topic, "--partition", "0", "--start-offset", "7")
    assert code == 1
    assert err.strip() == f"Could not find any open transactions starting at offset 7 on " \
                          f"partition {topic}-0"


def test_describe_an_unknown_transactional_id(odradek_broker, capsys):
    code, out, err = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap,
                              "describe", "--transactional-id", "no-such-id")
    assert code == 1 and out == ""
    assert err.startswith("Failed to describe transaction state of transactional-id "
                          "`no-such-id`: ")
    assert err.rstrip().endswith(". Enable debug logging for additional detail.")


def test_find_hanging_ignores_transactions_their_coordinator_knows(odradek_broker,
                                                                  open_transaction, capsys):
    _producer, topic, _transactional_id = open_transaction
    code, out, err = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap,
                              "find-hanging", "--broker-id", "1",
                              "--max-transaction-timeout", "0")
    assert code == 0, err
    assert _cells(out.splitlines()[0]) == transactions.FIND_HANGING_HEADERS
    assert [row for row in _table(out) if row["Topic"] == topic] == []


def test_find_hanging_argument_errors(odradek_broker, capsys):
    base = ["--bootstrap-server", odradek_broker.bootstrap, "find-hanging"]
    code, _out, err = run_tool(capsys, *base)
    assert (code, err.strip()) == (1, "The `find-hanging` command requires either --topic or "
                                      "--broker-id to limit the scope of the search")
    code, _out, err = run_tool(capsys, *base, "--broker-id", "1", "--partition", "0")
    assert (code, err.strip()) == (1, "The --partition argument requires --topic to be "
                                      "provided")


def test_usage_errors(capsys):
    code, _out, err = run_tool(capsys)
    assert code == 1 and "--bootstrap-server" in err
    code, _out, err = run_tool(capsys, "list")
    assert code == 1 and err.startswith("argument --bootstrap-server is required")
    code, _out, err = run_tool(capsys, "--bootstrap-server", "127.0.0.1:1", "describe")
    assert code == 1 and err.startswith("argument --transactional-id is required")
