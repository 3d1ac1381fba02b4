"""The leader's high watermark rules (Raft's commitment rule, in KRaft's form)."""

from __future__ import annotations

from odradek.raft.config import RaftConfig
from odradek.raft.leader_state import LeaderState
from odradek.raft.voters import VoterSet

EPOCH_START = 5  # this epoch's LeaderChange is at offset 5; offsets 0-4 come from older epochs


def leader(voters=(1, 2, 3, 4, 5), high_watermark: int = 2) -> LeaderState:
    return LeaderState(node_id=1, epoch=4, epoch_start_offset=EPOCH_START,
                       voters=VoterSet(voters), granting_voters=[1, 2, 3],
                       high_watermark=high_watermark, now_ms=0, config=RaftConfig())


def test_entries_of_older_epochs_are_not_committed_by_counting_their_replicas():
    # Raft's Figure 8: the old entries at 2-4 are on a majority (1, 2, 3), but none of this
    # epoch's is yet; committing them now could lose them to a candidate with a newer last
    # epoch (5 may win with the votes of 2, 3 and 4) and be truncated by it.
    state = leader()
    state.update_local_state(flushed_end_offset=EPOCH_START + 1, now_ms=1)
    assert not state.update_replica_state(2, fetch_offset=EPOCH_START, leader_end_offset=6,
                                          now_ms=1)
    assert not state.update_replica_state(3, fetch_offset=EPOCH_START, leader_end_offset=6,
                                          now_ms=1)
    assert state.high_watermark == 2
    # Once this epoch's LeaderChange is on a majority, everything before it commits with it.
    assert not state.update_replica_state(2, fetch_offset=EPOCH_START + 1, leader_end_offset=6,
                                          now_ms=2)  # leader and 2 only: not a majority
    assert state.update_replica_state(3, fetch_offset=EPOCH_START + 1, leader_end_offset=6,
                                      now_ms=2)
    assert state.high_watermark == EPOCH_START + 1


def test_the_high_watermark_is_the_majority_end_offset_counting_the_leaders_flushed_end():
    state = leader(voters=(1, 2, 3))
    state.update_replica_state(2, fetch_offset=9, leader_end_offset=9, now_ms=1)
    state.update_replica_state(3, fetch_offset=9, leader_end_offset=9, now_ms=1)
    assert state.high_watermark == 9  # 2 and 3 have it: a majority without the leader
    state = leader(voters=(1, 2, 3))
    state.update_replica_state(2, fetch_offset=9, leader_end_offset=9, now_ms=1)
    assert state.high_watermark == 2  # only one voter has it; the leader has flushed nothing
    state.update_local_state(flushed_end_offset=8, now_ms=2)
    assert state.high_watermark == 8


def test_observers_do_not_count_and_the_high_watermark_never_moves_back():
    state = leader(voters=(1, 2, 3))
    for observer in (7, 8, 9):
        assert not state.update_replica_state(observer, fetch_offset=9, leader_end_offset=9,
                                              now_ms=1)
    assert state.high_watermark == 2
    state.update_local_state(flushed_end_offset=9, now_ms=1)
    state.update_replica_state(2, fetch_offset=9, leader_end_offset=9, now_ms=1)
    assert state.high_watermark == 9
    # A voter fetching from a lower offset (it truncated, or a delayed fetch) takes nothing back.
    assert not state.update_replica_state(2, fetch_offset=6, leader_end_offset=9, now_ms=2)
    assert state.high_watermark == 9
