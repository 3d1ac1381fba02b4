"""Idempotent producer sequence checks (duplicates, gaps, epochs)."""

import pytest

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import BatchHeader, build_batch
from odradek.storage.producer_state import ProducerStateManager


def header(pid: int, epoch: int, seq: int, count: int = 2) -> BatchHeader:
    raw = build_batch([(1000 + i, b"k", b"v") for i in range(count)], producer_id=pid,
                      producer_epoch=epoch, base_sequence=seq)
    return BatchHeader.parse(raw, 0)


def test_in_order_duplicate_and_gap():
    state = ProducerStateManager()
    first = header(7, 0, 0)
    assert state.find_duplicate(first) is None
    state.record(first, 0, 1)
    second = header(7, 0, 2)
    assert state.find_duplicate(second) is None
    state.record(second, 2, 3)
    # A retry of the first batch is recognised with its original offsets.
    dup = state.find_duplicate(header(7, 0, 0))
    assert (dup.first_offset, dup.last_offset) == (0, 1)
    with pytest.raises(KafkaError) as err:
        state.find_duplicate(header(7, 0, 9))
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_epochs_and_unknown_producers():
    state = ProducerStateManager()
    # A producer with no state here may start anywhere (Kafka, KIP-360): its state may have
    # expired or gone with the segments that held it.
    assert state.find_duplicate(header(8, 0, 5)) is None
    state.record(header(8, 1, 0), 0, 1)
    with pytest.raises(KafkaError) as err:
        state.find_duplicate(header(8, 0, 2))
    assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # A bumped epoch restarts sequences at 0.
    assert state.find_duplicate(header(8, 2, 0)) is None
    with pytest.raises(KafkaError):
        state.find_duplicate(header(8, 2, 4))


def test_rebuild_from_headers_keeps_last_five():
    state = ProducerStateManager()
    headers = []
    for i in range(8):
        raw = build_batch([(1, None, b"v")], producer_id=3, producer_epoch=0, base_sequence=i,
                          base_offset=i)
        headers.append(BatchHeader.parse(raw, 0))
    state.rebuild(headers)
    assert state.find_duplicate(header(3, 0, 7, count=1)).first_offset == 7
    assert state.find_duplicate(header(3, 0, 8, count=1)) is None
    with pytest.raises(KafkaError):  # too old to be known as a duplicate, and out of order
        state.find_duplicate(header(3, 0, 1, count=1))
