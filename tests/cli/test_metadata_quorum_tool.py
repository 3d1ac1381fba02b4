"""`odradek metadata-quorum` without a quorum: Kafka 4.0's output formats from constructed
DescribeQuorum answers, and add-controller / remove-controller against a scripted peer
(tests/client/fake_broker.py) to check the requests the tool sends and what it prints for the
answers. The same commands against real nodes: test_tools_dynamic_quorum.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from client.fake_broker import FakeBroker, run

from odradek.cli import metadata_quorum
from odradek.cli.kraft_client import QuorumInfo, RaftVoterEndpoint, ReplicaState
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.ids import kafka_str_to_uuid
from odradek.storage.checkpoint import write_meta_properties

DIR_1 = "JEXY6aqzQY-32P5TStzaFg"
DIR_2 = "MvDxzVmcRsaTz33bUuRU6A"
DIR_4 = "07R5amHmR32VDA6jHkGbTA"
NOW = 1_700_000_010_000


def quorum(version: int = 2) -> QuorumInfo:
    voters = [ReplicaState(1, 100, NOW, NOW, kafka_str_to_uuid(DIR_1)),
              ReplicaState(2, 90, NOW - 1000, NOW - 5000, kafka_str_to_uuid(DIR_2))]
    observers = [ReplicaState(4, 80, NOW - 2000, None, kafka_str_to_uuid(DIR_4))]
    nodes = {1: [RaftVoterEndpoint("CONTROLLER", "h1", 9093)],
             2: [RaftVoterEndpoint("CONTROLLER", "::1", 9094),
                 RaftVoterEndpoint("CONTROLLER2", "h2", 9095)]}
    return QuorumInfo(1, 7, 100, voters, observers, nodes, version)


class TestDescribeOutput:
    def test_status_v2(self):
        lines = metadata_quorum.status_text("cid", quorum()).splitlines()
        assert lines == [
            "ClusterId:              cid",
            "LeaderId:               1",
            "LeaderEpoch:            7",
            "HighWatermark:          100",
            "MaxFollowerLag:         10",
            "MaxFollowerLagTimeMs:   5000",
            (f'CurrentVoters:          [{{"id": 1, "directoryId": "{DIR_1}", "endpoints": '
            f'["CONTROLLER://h1:9093"]}}, {{"id": 2, "directoryId": "{DIR_2}", "endpoints": '
            f'["CONTROLLER://[::1]:9094", "CONTROLLER2://h2:9095"]}}]'),
            f'CurrentObservers:       [{{"id": 4, "directoryId": "{DIR_4}"}}]',
        ]

    def test_zero_directory_id_and_no_endpoints_are_left_out(self):
        replica = ReplicaState(3, 0, None, None)
        assert metadata_quorum.replica_text(replica, []) == '{"id": 3}'
        assert (metadata_quorum.replica_text(replica, [RaftVoterEndpoint("C", "h", 1)])
                == '{"id": 3, "endpoints": ["C://h:1"]}')

    def test_status_v1_keeps_kafka_38s_ids(self):
        lines = metadata_quorum.status_text("cid", quorum(version=1)).splitlines()
        assert lines[6:] == ["CurrentVoters:          [1,2]", "CurrentObservers:       [4]"]

    def test_replication_v2(self):
        info = quorum()
        table = metadata_quorum.pretty_table(
            metadata_quorum.replication_headers(info),
            metadata_quorum.replication_rows(info, human_readable=False))
        rows = [line.split("\t") for line in table.splitlines()]
        assert [cell.strip() for cell in rows[0]] == [
            "NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
            "LastCaughtUpTimestamp", "Status", ""]
        assert [[cell.strip() for cell in row[:-1]] for row in rows[1:]] == [
            ["1", DIR_1, "100", "0", str(NOW), str(NOW), "Leader"],
            ["2", DIR_2, "90", "10", str(NOW - 1000), str(NOW - 5000), "Follower"],
            ["4", DIR_4, "80", "20", str(NOW - 2000), "-1", "Observer"]]
        human = metadata_quorum.replication_rows(info, human_readable=True, now_ms=NOW)
        assert human[1][4:] == ["1000 ms ago", "5000 ms ago", "Follower"]

    def test_replication_v1(self):
        info = quorum(version=1)
        assert metadata_quorum.replication_headers(info) == metadata_quorum.REPLICATION_HEADERS
        assert metadata_quorum.replication_rows(info, False)[0] == [
            "1", "100", "0", str(NOW), str(NOW), "Leader"]


# ------------------------------------------------------------------------------------------
# add-controller / remove-controller against a scripted peer


def controller_properties(tmp_path: Path, **extra: str) -> Path:
    data = tmp_path / "meta"
    data.mkdir()
    write_meta_properties(str(data), "fMCL8kv1SWm87L_Md-I2hg", 3, DIR_2)
    props = {"process.roles": "controller", "node.id": "3",
             "controller.quorum.bootstrap.servers": "localhost:9093",
             "listeners": "CONTROLLER://:9095", "controller.listener.names": "CONTROLLER",
             "metadata.log.dir": str(data), **extra}
    path = tmp_path / "controller.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
    return path


def answering(*error_codes: tuple[int, str | None], voter_api: int = 80):
    """A handler answering the voter API with the given (error code, message) in turn."""
    answers = list(error_codes)
    response_type = m.AddRaftVoterResponse if voter_api == 80 else m.RemoveRaftVoterResponse

    def handler(header, request):
        assert header.request_api_key == voter_api and header.request_api_version == 0
        code, message = answers.pop(0)
        return response_type(error_code=code, error_message=message)

    return handler


def run_against(capsys, peer: FakeBroker, *args: str,
                option: str = "--bootstrap-controller") -> tuple[int, str, str]:
    async def body() -> int:
        await peer.start()
        try:
            return await asyncio.to_thread(metadata_quorum.main,
                                           [option, peer.address, *args])
        finally:
            await peer.close()

    code = run(body())
    captured = capsys.readouterr()
    return code, captured.out, captured.err


class TestAddController:
    def test_request_and_output(self, tmp_path, capsys):
        config = controller_properties(tmp_path, **{
            "advertised.listeners": "CONTROLLER://ctl3.example:9095"})
        peer = FakeBroker(answering((0, None)))
        code, out, err = run_against(capsys, peer, "--command-config", str(config),
                                     "add-controller")
        assert code == 0, err
        assert out == (f"Added controller 3 with directory id {DIR_2} and endpoints: "
                       "CONTROLLER://ctl3.example:9095\n")
        [(_, request)] = peer.requests_of(80)
        assert isinstance(request, m.AddRaftVoterRequest)
        assert (request.cluster_id, request.voter_id, request.voter_directory_id) == (
            None, 3, kafka_str_to_uuid(DIR_2))
        assert [(lst.name, lst.host, lst.port) for lst in request.listeners] == [
            ("CONTROLLER", "ctl3.example", 9095)]
        assert 0 < request.timeout_ms <= 60_000  # the call's time left (default.api.timeout.ms)

    def test_not_the_leader_goes_on_to_the_next_node(self, tmp_path, capsys):
        config = controller_properties(tmp_path)
        follower = FakeBroker(answering((ErrorCode.NOT_LEADER_OR_FOLLOWER.code, None)))
        leader = FakeBroker(answering((0, None)))

        async def body() -> int:
            await follower.start()
            await leader.start()
            try:
                return await asyncio.to_thread(metadata_quorum.main, [
                    "--bootstrap-controller", f"{follower.address},{leader.address}",
                    "--command-config", str(config), "add-controller"])
            finally:
                await follower.close()
                await leader.close()

        assert run(body()) == 0
        assert capsys.readouterr().out == (f"Added controller 3 with directory id {DIR_2} and "
                                           "endpoints: CONTROLLER://localhost:9095\n")
        assert len(follower.requests_of(80)) == 1 and len(leader.requests_of(80)) == 1

    def test_error_is_kafkas_exception_text(self, tmp_path, capsys):
        config = controller_properties(tmp_path)
        peer = FakeBroker(answering((ErrorCode.DUPLICATE_VOTER.code,
                                     ("The voter id for ReplicaKey(id=3) is already part of the "
                                     "set of voters."))))
        code, out, err = run_against(capsys, peer, "--command-config", str(config),
                                     "add-controller")
        assert (code, out) == (1, "")
        text = ("org.apache.kafka.common.errors.DuplicateVoterException: The voter id for "
                "ReplicaKey(id=3) is already part of the set of voters.")
        assert err.splitlines() == [text, f"java.util.concurrent.ExecutionException: {text}"]

    def test_node_without_the_api(self, tmp_path, capsys):
        config = controller_properties(tmp_path)
        versions = {k: (s.min_version, s.max_version) for k, s in m.API_BY_KEY.items()
                    if k not in (80, 81)}
        peer = FakeBroker(api_versions=versions)
        code, out, err = run_against(capsys, peer, "--command-config", str(config),
                                     "add-controller")
        assert (code, out) == (1, "")
        assert err.splitlines()[0] == ("org.apache.kafka.common.errors."
                                       "UnsupportedVersionException: The node does not support "
                                       "ADD_RAFT_VOTER")
        assert peer.requests_of(80) == []

    def test_dry_run_sends_nothing(self, tmp_path, capsys):
        config = controller_properties(tmp_path, listeners="CONTROLLER://[::1]:9095")
        peer = FakeBroker(answering())
        code, out, _ = run_against(capsys, peer, "--command-config", str(config),
                                   "add-controller", "--dry-run")
        assert (code, out) == (0, (f"DRY RUN of adding controller 3 with directory id {DIR_2} "
                                  "and endpoints: CONTROLLER://[::1]:9095\n"))
        assert peer.requests_of(80) == []

    @pytest.mark.parametrize(("change", "message"), [
        ({"process.roles": "broker"}, ("process.roles did not contain 'controller' in "
         "configuration file. Is this a valid controller configuration file?")),
        ({"controller.listener.names": "OTHER"},
         "Cannot find information about controller listener name: OTHER"),
        ({"metadata.log.dir": "/nonexistent/dir"},
         "Unable to read meta.properties from /nonexistent/dir"),
    ])
    def test_config_problems(self, tmp_path, capsys, change, message):
        config = controller_properties(tmp_path, **change)
        code, _, err = run_against(capsys, FakeBroker(answering()), "--command-config",
                                   str(config), "add-controller")
        assert (code, err.strip()) == (1, message)


class TestRemoveController:
    def test_request_and_output(self, capsys):
        peer = FakeBroker(answering((0, None), voter_api=81))
        code, out, err = run_against(capsys, peer, "remove-controller", "--controller-id", "2",
                                     "--controller-directory-id", DIR_2,
                                     option="--bootstrap-server")
        assert code == 0, err
        # Kafka's format string leaves two spaces after "Removed".
        assert out == f"Removed  KRaft controller 2 with directory id {DIR_2}\n"
        [(_, request)] = peer.requests_of(81)
        assert (request.cluster_id, request.voter_id, request.voter_directory_id) == (
            None, 2, kafka_str_to_uuid(DIR_2))

    def test_voter_not_found(self, capsys):
        peer = FakeBroker(answering((ErrorCode.VOTER_NOT_FOUND.code, None), voter_api=81))
        code, out, err = run_against(capsys, peer, "remove-controller", "-i", "2", "-d", DIR_2)
        assert (code, out) == (1, "")
        assert err.splitlines()[0] == ("org.apache.kafka.common.errors.VoterNotFoundException: "
                                       "The voter is not in the voter set.")

    @pytest.mark.parametrize(("args", "message"), [
        (["-i", "-1", "-d", DIR_2], "Invalid negative --controller-id: -1"),
        (["-i", "2", "-d", "abc"], ("Failed to parse --controller-directory-id: Input string "
         "`abc` decoded as 2 bytes, which is not equal to the expected 16 bytes of a "
         "base64-encoded UUID")),
        (["-i", "2", "-d", "a.c"], ("Failed to parse --controller-directory-id: Illegal base64 "
         "character 2e")),
        (["-i", "2", "-d", "x" * 25], ("Failed to parse --controller-directory-id: Input string "
         f"with prefix `{'x' * 24}` is too long to be decoded as a base64 UUID")),
    ])
    def test_argument_problems(self, capsys, args, message):
        peer = FakeBroker(answering(voter_api=81))
        code, out, err = run_against(capsys, peer, "remove-controller", *args)
        assert (code, out, err.strip()) == (1, "", message)
        assert peer.requests_of(81) == []
