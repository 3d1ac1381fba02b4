"""The voter set as data (KIP-853's VoterSet, reduced to what static voters need).

Today the set comes from `controller.quorum.voters` and never changes; KIP-853 makes it a log
record (VotersRecord) that AddRaftVoter/RemoveRaftVoter change. Keeping it a value passed around
(never a global) leaves room for that: a voter may carry its directory id and endpoints.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Voter:
    node_id: int
    directory_id: uuid.UUID | None = None  # KIP-853 voter key; None with static voters
    endpoints: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # listener -> host/port


class VoterSet:
    """An immutable set of voters."""

    def __init__(self, voters: Iterable[Voter | int]) -> None:
        by_id: dict[int, Voter] = {}
        for voter in voters:
            entry = voter if isinstance(voter, Voter) else Voter(int(voter))
            if entry.node_id < 0:
                raise ValueError(f"invalid voter id {entry.node_id}")
            by_id[entry.node_id] = entry
        if not by_id:
            raise ValueError("a voter set needs at least one voter")
        self._voters = dict(sorted(by_id.items()))

    @property
    def ids(self) -> list[int]:
        return list(self._voters)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._voters

    def __iter__(self) -> Iterator[int]:
        return iter(self._voters)

    def __len__(self) -> int:
        return len(self._voters)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSet) and other._voters == self._voters

    def __hash__(self) -> int:
        return hash(tuple(self._voters))

    def voter(self, node_id: int) -> Voter:
        return self._voters[node_id]

    @property
    def majority(self) -> int:
        """How many voters make a majority."""
        return len(self._voters) // 2 + 1

    def is_only_voter(self, node_id: int) -> bool:
        return len(self._voters) == 1 and node_id in self._voters

    def __repr__(self) -> str:
        return f"VoterSet({self.ids})"
