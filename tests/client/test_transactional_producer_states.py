"""The transactional producer's state machine and error classification, against a scripted
peer (`FakeTxnBroker`): which requests it sends in which order, what is retried, what is
fatal and what only aborts the transaction. Broker behaviour: test_transactional_producer.py."""

from __future__ import annotations

import asyncio

import pytest
from fake_broker import run
from fake_txn_broker import (
    ADD_OFFSETS,
    ADD_PARTITIONS,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    PRODUCE,
    TXN_OFFSET_COMMIT,
    FakeTxnBroker,
)

from odradek.client import (
    AsyncProducer,
    ConsumerGroupMetadata,
    KafkaConfigError,
    KafkaError,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
    TransactionState,
    TransactionStateError,
)
from odradek.protocol.errors import ErrorCode


def _config(broker: FakeTxnBroker, **extra) -> dict:
    return {"bootstrap.servers": broker.address, "transactional.id": "txn-1",
            "retry.backoff.ms": 5, "retry.backoff.max.ms": 20, "max.block.ms": 10_000,
            **extra}


def _api_order(broker: FakeTxnBroker) -> list[int]:
    wanted = {INIT_PRODUCER_ID, ADD_PARTITIONS, PRODUCE, ADD_OFFSETS, TXN_OFFSET_COMMIT, END_TXN}
    return [h.request_api_key for h, _r in broker.broker.requests
            if h.request_api_key in wanted]


def test_a_committed_transaction_adds_partitions_before_producing_and_ends_with_end_txn():
    async def scenario():
        async with FakeTxnBroker({"t": 2}) as broker:
            async with AsyncProducer(_config(broker, **{"linger.ms": 50})) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                futures = [await producer.send("t", b"v", partition=i % 2) for i in range(4)]
                await producer.commit_transaction()
                offsets = [(f.partition, f.offset) for f in
                           [await future for future in futures]]
            return broker, offsets

    broker, offsets = run(scenario())
    finds = broker.requests_of(FIND_COORDINATOR)
    assert finds[0].key_type == 1 and (finds[0].coordinator_keys or [finds[0].key]) == ["txn-1"]
    (init,) = broker.requests_of(INIT_PRODUCER_ID)
    assert init.transactional_id == "txn-1" and init.transaction_timeout_ms == 60_000
    # Both partitions in one AddPartitionsToTxn, before any Produce; EndTxn last.
    assert broker.added == [[("t", 0), ("t", 1)]]
    order = _api_order(broker)
    assert order[:2] == [INIT_PRODUCER_ID, ADD_PARTITIONS] and order[-1] == END_TXN
    assert set(order[2:-1]) == {PRODUCE}
    assert broker.end_txns == [(True, 4000, 0)]
    assert all(txn_id == "txn-1" and transactional
               for txn_id, *_rest, transactional in broker.produced)
    assert sorted(offsets) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_state_errors_are_kafkas():
    async def scenario():
        async with FakeTxnBroker() as broker:
            async with AsyncProducer(_config(broker)) as producer:
                with pytest.raises(TransactionStateError, match="before completing a call to "
                                                                "initTransactions"):
                    await producer.send("t", b"v")
                with pytest.raises(TransactionStateError, match="from state UNINITIALIZED to "
                                                                "state IN_TRANSACTION"):
                    producer.begin_transaction()
                await producer.init_transactions()
                with pytest.raises(TransactionStateError, match="Cannot call send in state "
                                                                "READY"):
                    await producer.send("t", b"v")
                with pytest.raises(TransactionStateError, match="from state READY to state "
                                                                "COMMITTING_TRANSACTION"):
                    await producer.commit_transaction()
                with pytest.raises(KafkaError, match="not in an active transaction"):
                    await producer.send_offsets_to_transaction({TopicPartition("t", 0): 1}, "g")
                producer.begin_transaction()
                with pytest.raises(TransactionStateError, match="from state IN_TRANSACTION to "
                                                                "state IN_TRANSACTION"):
                    producer.begin_transaction()
                # An empty transaction ends without a broker call.
                await producer.commit_transaction()
                assert broker.end_txns == []
                with pytest.raises(TransactionStateError, match="from state READY to state "
                                                                "INITIALIZING"):
                    await producer.init_transactions()
            async with AsyncProducer({"bootstrap.servers": broker.address}) as plain:
                with pytest.raises(TransactionStateError, match="non-transactional producer"):
                    await plain.init_transactions()

    run(scenario())


def test_configuration_rules():
    with pytest.raises(KafkaConfigError, match="without also enabling idempotence"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "x",
                  "enable.idempotence": False})
    with pytest.raises(KafkaConfigError, match="acks to all"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "x", "acks": "1"})


def test_retriable_coordinator_errors_are_retried_and_not_coordinator_finds_it_again():
    async def scenario():
        async with FakeTxnBroker() as broker:
            broker.fail[FIND_COORDINATOR].extend([ErrorCode.COORDINATOR_NOT_AVAILABLE])
            broker.fail[INIT_PRODUCER_ID].extend([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                                  ErrorCode.NOT_COORDINATOR,
                                                  ErrorCode.CONCURRENT_TRANSACTIONS])
            broker.fail[ADD_PARTITIONS].extend([ErrorCode.CONCURRENT_TRANSACTIONS,
                                                ErrorCode.NOT_COORDINATOR])
            broker.fail[END_TXN].extend([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                         ErrorCode.CONCURRENT_TRANSACTIONS])
            async with AsyncProducer(_config(broker)) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                future = await producer.send("t", b"v", partition=0)
                await producer.commit_transaction()
                assert (await future).offset == 0
                assert producer._txn.state == TransactionState.READY
            return broker

    broker = run(scenario())
    assert len(broker.requests_of(INIT_PRODUCER_ID)) == 4
    assert len(broker.requests_of(ADD_PARTITIONS)) == 3
    # the first lookup failed, then one more after each NOT_COORDINATOR
    assert len(broker.requests_of(FIND_COORDINATOR)) == 4
    assert broker.end_txns == [(True, 4000, 0)]


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
def test_a_fenced_producer_fails_fatally(code):
    async def scenario():
        async with FakeTxnBroker() as broker:
            broker.fail[END_TXN].append(code)
            async with AsyncProducer(_config(broker)) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                await (await producer.send("t", b"v", partition=0))
                with pytest.raises(KafkaError) as commit_error:
                    await producer.commit_transaction()
                assert commit_error.value.code == ErrorCode.PRODUCER_FENCED
                assert producer._txn.state == TransactionState.FATAL_ERROR
                with pytest.raises(KafkaError, match="Cannot perform send"):
                    await producer.send("t", b"v", partition=0)
                with pytest.raises(KafkaError) as abort_error:
                    await producer.abort_transaction()
                assert abort_error.value.code == ErrorCode.PRODUCER_FENCED
            return broker

    broker = run(scenario())
    assert broker.end_txns == []


def test_a_failed_send_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch():
    async def scenario():
        async with FakeTxnBroker() as broker:
            async with AsyncProducer(_config(broker)) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                await (await producer.send("t", b"ok", partition=0))
                broker.fail[PRODUCE].append(ErrorCode.INVALID_RECORD)
                failed = await producer.send("t", b"bad", partition=0)
                with pytest.raises(KafkaError) as send_error:
                    await failed
                assert send_error.value.code == ErrorCode.INVALID_RECORD
                assert producer._txn.state == TransactionState.ABORTABLE_ERROR
                with pytest.raises(KafkaError, match="Cannot perform send"):
                    await producer.send("t", b"v", partition=0)
                with pytest.raises(KafkaError) as commit_error:
                    await producer.commit_transaction()
                assert commit_error.value.code == ErrorCode.INVALID_RECORD
                await producer.abort_transaction()
                assert producer._txn.state == TransactionState.READY
                # The next transaction runs at the bumped epoch, sequences from 0.
                producer.begin_transaction()
                await (await producer.send("t", b"again", partition=0))
                await producer.commit_transaction()
            return broker

    broker = run(scenario())
    # KIP-360: InitProducerId with the current producer id and epoch after the abort
    assert broker.init_requests == [(-1, -1), (4000, 0)]
    assert broker.end_txns == [(False, 4000, 0), (True, 4000, 1)]
    produces = broker.requests_of(PRODUCE)
    last = bytes(produces[-1].topic_data[0].partition_data[0].records)
    assert int.from_bytes(last[51:53], "big") == 1  # epoch
    assert int.from_bytes(last[53:57], "big") == 0  # base sequence


def test_records_queued_when_aborting_fail_and_are_never_sent():
    async def scenario():
        async with FakeTxnBroker() as broker:
            async with AsyncProducer(_config(broker, **{"linger.ms": 60_000})) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                future = await producer.send("t", b"v", partition=1)
                await producer.abort_transaction()
                with pytest.raises(KafkaError, match="transaction was aborted"):
                    await future
            return broker

    broker = run(scenario())
    assert broker.requests_of(PRODUCE) == [] and broker.end_txns == []


def test_offsets_go_to_the_transaction_and_the_group_coordinator():
    group = ConsumerGroupMetadata("g1", 7, "member-1", "instance-1")

    async def scenario():
        async with FakeTxnBroker() as broker:
            broker.fail[TXN_OFFSET_COMMIT].append(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            async with AsyncProducer(_config(broker)) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                await producer.send_offsets_to_transaction(
                    {TopicPartition("in", 0): 5,
                     TopicPartition("in", 1): OffsetAndMetadata(9, "m")}, group)
                await producer.commit_transaction()
            return broker

    broker = run(scenario())
    (add,) = broker.requests_of(ADD_OFFSETS)
    assert (add.transactional_id, add.group_id, add.producer_id) == ("txn-1", "g1", 4000)
    (commit,) = broker.offset_commits
    assert (commit.group_id, commit.generation_id, commit.member_id,
            commit.group_instance_id) == ("g1", 7, "member-1", "instance-1")
    assert [(p.partition_index, p.committed_offset, p.committed_metadata)
            for t in commit.topics for p in t.partitions] == [(0, 5, ""), (1, 9, "m")]
    group_lookups = [r for r in broker.requests_of(FIND_COORDINATOR) if r.key_type == 0]
    assert group_lookups and (group_lookups[0].coordinator_keys or
                              [group_lookups[0].key]) == ["g1"]
    assert _api_order(broker)[-1] == END_TXN and broker.end_txns == [(True, 4000, 0)]


def test_a_stale_group_member_makes_the_offsets_abortable():
    async def scenario():
        async with FakeTxnBroker() as broker:
            broker.fail[TXN_OFFSET_COMMIT].append(ErrorCode.ILLEGAL_GENERATION)
            async with AsyncProducer(_config(broker)) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                with pytest.raises(KafkaError, match="consumer group metadata mismatch"):
                    await producer.send_offsets_to_transaction(
                        {TopicPartition("in", 0): 5}, ConsumerGroupMetadata("g1", 3, "m"))
                assert producer._txn.state == TransactionState.ABORTABLE_ERROR
                await producer.abort_transaction()
            return broker

    broker = run(scenario())
    assert broker.end_txns == [(False, 4000, 0)]


def test_init_transactions_times_out_and_a_second_call_resumes_it():
    async def scenario():
        async with FakeTxnBroker() as broker:
            # The coordinator keeps loading for a while.
            broker.fail[INIT_PRODUCER_ID].extend([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 30)
            async with AsyncProducer(_config(broker)) as producer:
                with pytest.raises(KafkaError, match="while awaiting initTransactions"):
                    await producer.init_transactions(timeout_ms=1)
                await producer.init_transactions()
                assert producer._txn.state == TransactionState.READY
            return broker

    broker = run(scenario())
    assert len(broker.requests_of(INIT_PRODUCER_ID)) == 31


def test_close_aborts_an_open_transaction():
    async def scenario():
        async with FakeTxnBroker() as broker:
            producer = AsyncProducer(_config(broker))
            await producer.init_transactions()
            producer.begin_transaction()
            await (await producer.send("t", b"v", partition=0))
            await producer.close()
            return broker

    broker = run(scenario())
    assert broker.end_txns == [(False, 4000, 0)]


def test_the_blocking_producer_runs_a_transaction():
    async def start():
        broker = FakeTxnBroker()
        await broker.broker.start()
        return broker

    loop = asyncio.new_event_loop()
    try:
        broker = loop.run_until_complete(start())
        import threading

        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        with Producer(_config(broker)) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            metadata = producer.send("t", b"v", partition=1).get(10)
            producer.commit_transaction()
        assert metadata.offset == 0
        assert broker.end_txns == [(True, 4000, 0)]
        asyncio.run_coroutine_threadsafe(broker.broker.close(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
