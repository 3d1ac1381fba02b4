"""The voter set as data (Kafka's VoterSet) and its log form, the VotersRecord control record.

With static voters (`controller.quorum.voters`, kraft.version 0) the set comes from the config
and never changes. With a dynamic quorum (KIP-853, kraft.version 1) it lives in the metadata
log: `storage format --standalone` / `--initial-controllers` writes the first one into the
bootstrap snapshot, and AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter append new ones. A
voter is then named by its id and its directory id (the metadata log directory's `directory.id`
from meta.properties), so a disk replaced under the same node id is a different voter, and it
carries its controller listener endpoints and the kraft.version range it supports.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from odradek.protocol import messages as m

# kraft.version: 0 = static voters from the config, 1 = voters in the log (KIP-853).
KRAFT_VERSION_STATIC = 0
KRAFT_VERSION_DYNAMIC = 1
SUPPORTED_KRAFT_VERSIONS = (KRAFT_VERSION_STATIC, KRAFT_VERSION_DYNAMIC)
# A voter's directory id when none is known (Kafka's Uuid.ZERO_UUID): static voters.
NO_DIRECTORY_ID = uuid.UUID(int=0)


def directory_id_or_none(directory_id: uuid.UUID | None) -> uuid.UUID | None:
    """A directory id off the wire: the zero uuid (none given) as None."""
    return None if directory_id in (None, NO_DIRECTORY_ID) else directory_id


@dataclass(frozen=True)
class Voter:
    node_id: int
    directory_id: uuid.UUID | None = None  # KIP-853 voter key; None with static voters
    endpoints: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # listener -> host/port
    kraft_versions: tuple[int, int] = SUPPORTED_KRAFT_VERSIONS  # supported (min, max)

    def endpoint(self, listener: str | None = None) -> tuple[str, int] | None:
        """The endpoint on `listener`, or the first one (Kafka's default listener is the first
        of controller.listener.names)."""
        if listener is not None:
            return self.endpoints.get(listener)
        return next(iter(self.endpoints.values()), None)


class VoterSet:
    """An immutable set of voters."""

    def __init__(self, voters: Iterable[Voter | int]) -> None:
        by_id: dict[int, Voter] = {}
        for voter in voters:
            entry = voter if isinstance(voter, Voter) else Voter(int(voter))
            if entry.node_id < 0:
                raise ValueError(f"invalid voter id {entry.node_id}")
            by_id[entry.node_id] = entry
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

    def voters(self) -> list[Voter]:
        return list(self._voters.values())

    def is_voter(self, node_id: int, directory_id: uuid.UUID | None) -> bool:
        """Whether (id, directory id) is a voter; a voter without a directory id (static) or a
        caller that does not know its own (None) match on the id alone."""
        voter = self._voters.get(node_id)
        if voter is None:
            return False
        return (voter.directory_id is None or directory_id is None
                or voter.directory_id == directory_id)

    @property
    def majority(self) -> int:
        """How many voters make a majority."""
        return len(self._voters) // 2 + 1

    def is_only_voter(self, node_id: int) -> bool:
        return len(self._voters) == 1 and node_id in self._voters

    def with_voter(self, voter: Voter) -> VoterSet:
        """This set plus `voter` (replacing a voter of the same id)."""
        return VoterSet([*(v for v in self._voters.values() if v.node_id != voter.node_id),
                         voter])

    def without_voter(self, node_id: int) -> VoterSet:
        """This set less voter `node_id`; ValueError if that would leave it empty."""
        rest = [v for v in self._voters.values() if v.node_id != node_id]
        if not rest:
            raise ValueError("a quorum cannot lose its last voter")
        return VoterSet(rest)

    def endpoints(self, listener: str | None = None) -> dict[int, tuple[str, int]]:
        """node id -> endpoint, for the voters that have one."""
        out = {}
        for voter in self._voters.values():
            endpoint = voter.endpoint(listener)
            if endpoint is not None:
                out[voter.node_id] = endpoint
        return out

    def __repr__(self) -> str:
        return f"VoterSet({self.ids})"


class VoterSetHistory:
    """The voter sets and kraft.version levels the log holds, by offset (Kafka's
    KRaftControlRecordStateMachine with its VoterSetHistory). A set takes effect at the offset
    of its VotersRecord, committed or not (KIP-853: a leader counts the new set's majority as
    soon as it appends it); a truncated log takes its sets with it. Before any VotersRecord, the
    static set from `controller.quorum.voters` applies (empty for a node that has none)."""

    def __init__(self, static: VoterSet | None = None) -> None:
        self.static = static if static is not None else VoterSet([])
        self._voters: list[tuple[int, VoterSet]] = []  # (offset, set), offsets increasing
        self._kraft: list[tuple[int, int]] = []  # (offset, kraft.version)

    @property
    def latest(self) -> VoterSet:
        return self._voters[-1][1] if self._voters else self.static

    @property
    def last_entry(self) -> tuple[int, VoterSet] | None:
        """The newest VotersRecord's (offset, set); None when only the static set applies."""
        return self._voters[-1] if self._voters else None

    @property
    def kraft_version(self) -> int:
        return self._kraft[-1][1] if self._kraft else KRAFT_VERSION_STATIC

    def voters_at(self, offset: int) -> VoterSet:
        """The set in effect at `offset` (its record included)."""
        for at, voters in reversed(self._voters):
            if at <= offset:
                return voters
        return self.static

    def kraft_version_at(self, offset: int) -> int:
        for at, level in reversed(self._kraft):
            if at <= offset:
                return level
        return KRAFT_VERSION_STATIC

    def add_voters(self, offset: int, voters: VoterSet) -> None:
        self._truncate(self._voters, offset)
        self._voters.append((offset, voters))

    def add_kraft_version(self, offset: int, level: int) -> None:
        self._truncate(self._kraft, offset)
        self._kraft.append((offset, level))

    def truncate_from(self, offset: int) -> bool:
        """The log lost every offset from `offset` on; returns whether the latest set changed."""
        before = self.latest
        self._truncate(self._voters, offset)
        self._truncate(self._kraft, offset)
        return self.latest != before

    def reset(self, offset: int, kraft_version: int, voters: VoterSet | None) -> None:
        """Everything before `offset` is replaced by a snapshot holding these."""
        self._voters = [(offset - 1, voters)] if voters is not None else []
        self._kraft = [(offset - 1, kraft_version)]

    @staticmethod
    def _truncate(entries: list, offset: int) -> None:
        while entries and entries[-1][0] >= offset:
            entries.pop()


# ------------------------------------------------------------------------------------------------
# the log form


def voters_record(voters: VoterSet) -> m.VotersRecord:
    """The VotersRecord control record of a voter set."""
    R = m.VotersRecord
    return R(version=0, voters=[
        R.Voter(voter_id=voter.node_id, voter_directory_id=voter.directory_id or NO_DIRECTORY_ID,
                endpoints=[R.Endpoint(name=name, host=host, port=port)
                           for name, (host, port) in voter.endpoints.items()],
                kraft_version_feature=R.KRaftVersionFeature(
                    min_supported_version=voter.kraft_versions[0],
                    max_supported_version=voter.kraft_versions[1]))
        for voter in voters.voters()])


def voter_set_from_record(record: m.VotersRecord) -> VoterSet:
    """The voter set a VotersRecord holds; ValueError if it holds none."""
    out = []
    for voter in record.voters:
        feature = voter.kraft_version_feature
        out.append(Voter(
            voter.voter_id,
            directory_id_or_none(voter.voter_directory_id),
            {endpoint.name: (endpoint.host, endpoint.port) for endpoint in voter.endpoints},
            (feature.min_supported_version, feature.max_supported_version)))
    return VoterSet(out)


def kraft_version_record(kraft_version: int) -> m.KRaftVersionRecord:
    return m.KRaftVersionRecord(version=0, kraft_version=kraft_version)
