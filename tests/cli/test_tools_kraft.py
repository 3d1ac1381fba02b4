"""The KRaft tools against a real single-node broker+controller: `metadata-quorum`, `features`,
`dump-log --cluster-metadata-decoder` on its metadata log (and on a KRaft snapshot file) and
`metadata-shell` on its metadata log."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from broker_process import ODRADEK

from odradek.cli import dump_log, features, metadata_quorum, metadata_shell
from odradek.client import Admin, NewTopic
from odradek.protocol import messages as m
from odradek.protocol.records import ControlRecordType, build_batch, build_control_record_batch
from odradek.storage.checkpoint import read_meta_properties

TOPIC = f"kraft-tools-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def node(odradek_broker):
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, 2, 1, configs={"retention.ms": "123456"})])
    return odradek_broker


@pytest.fixture(scope="module")
def meta(node) -> dict[str, str]:
    return read_meta_properties(str(node.data_dir))


def run(capsys, tool, *args: str) -> tuple[int, str, str]:
    code = tool.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------------------------------
# metadata-quorum


@pytest.mark.parametrize("listener", ["broker", "controller"])
def test_describe_status(node, meta, capsys, listener):
    bootstrap = (["--bootstrap-server", node.bootstrap] if listener == "broker" else
                 ["--bootstrap-controller", f"127.0.0.1:{node.controller_port}"])
    code, out, err = run(capsys, metadata_quorum, *bootstrap, "describe", "--status")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"ClusterId:              {meta['cluster.id']}"
    assert lines[1] == "LeaderId:               1"
    assert re.fullmatch(r"LeaderEpoch:            [1-9]\d*", lines[2])
    assert re.fullmatch(r"HighWatermark:          [1-9]\d*", lines[3])
    assert lines[4:6] == ["MaxFollowerLag:         0", "MaxFollowerLagTimeMs:   0"]
    # Kafka 4.0's format of a DescribeQuorum v2 answer: a static voter has no directory id;
    # its endpoint is there once the leader fills in the v2 `nodes`.
    assert re.fullmatch(r'CurrentVoters:          \[\{"id": 1'
                        rf'(, "endpoints": \["CONTROLLER://[\w.]+:{node.controller_port}"\])?'
                        r"\}\]", lines[6]), lines[6]
    assert lines[7:] == ["CurrentObservers:       []"]


def test_describe_replication(node, capsys):
    code, out, _ = run(capsys, metadata_quorum, "--bootstrap-server", node.bootstrap,
                       "describe", "--replication")
    assert code == 0
    header, leader = out.splitlines()
    # Kafka's prettyPrintTable: every cell padded to its column, then a tab; Kafka 4.0's
    # DirectoryId column (a static voter's is the zero uuid).
    assert header == ("NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\t"
                      "LastCaughtUpTimestamp\tStatus\t")
    cells = leader.split("\t")
    assert cells[0].strip() == "1" and cells[1] == "AAAAAAAAAAAAAAAAAAAAAA"
    assert cells[3].strip() == "0"
    assert re.fullmatch(r"\d{13}", cells[4].strip()) and cells[6] == "Leader"
    assert len(cells[0]) == len("NodeId") and cells[-1] == ""
    code, out, _ = run(capsys, metadata_quorum, "--bootstrap-server", node.bootstrap,
                       "describe", "--replication", "--human-readable")
    assert code == 0
    assert re.search(r"\d+ ms ago\s*\t\d+ ms ago\s*\tLeader\t$", out.splitlines()[1])


def test_describe_needs_status_or_replication(node, capsys):
    code, _, err = run(capsys, metadata_quorum, "--bootstrap-server", node.bootstrap,
                       "describe")
    assert (code, err) == (1, ("One of --status or --replication must be specified with "
                              "describe sub-command\n"))
    code, _, err = run(capsys, metadata_quorum, "--bootstrap-server", node.bootstrap,
                       "describe", "--status", "--human-readable")
    assert (code, err.strip()) == (1, ("The option --human-readable is only supported along "
                                      "with --replication"))
    code, _, err = run(capsys, metadata_quorum, "--bootstrap-server", node.bootstrap,
                       "--bootstrap-controller", "x:1", "describe", "--status")
    assert code == 1 and "not allowed with argument --bootstrap-server" in err


def test_add_and_remove_controller_refused_by_a_static_quorum(node, meta, capsys):
    """A quorum of `controller.quorum.voters` (kraft.version 0) cannot change its voters:
    Kafka's UnsupportedVersionException from the leader, through either listener."""
    config = str(node.config_path)
    code, out, err = run(capsys, metadata_quorum, "--bootstrap-server", node.bootstrap,
                         "--command-config", config, "add-controller")
    assert code == 1 and out == ""
    assert err.splitlines()[0] == (
        "org.apache.kafka.common.errors.UnsupportedVersionException: Cluster doesn't support "
        "adding voter because the kraft.version feature is 0")
    code, out, err = run(capsys, metadata_quorum, "--bootstrap-controller",
                         f"127.0.0.1:{node.controller_port}", "remove-controller",
                         "--controller-id", "1", "--controller-directory-id",
                         meta["directory.id"])
    assert code == 1 and out == ""
    assert err.splitlines()[0] == (
        "org.apache.kafka.common.errors.UnsupportedVersionException: Cluster doesn't support "
        "removing voter because the kraft.version feature is 0")
    # --dry-run only prints what would be done (Kafka does not contact the node either).
    code, out, _ = run(capsys, metadata_quorum, "--bootstrap-server", node.bootstrap,
                       "--command-config", config, "add-controller", "--dry-run")
    assert code == 0
    assert out == (f"DRY RUN of adding controller 1 with directory id {meta['directory.id']} "
                   f"and endpoints: CONTROLLER://127.0.0.1:{node.controller_port}\n")
    code, _, err = run(capsys, metadata_quorum, "--bootstrap-server", node.bootstrap,
                       "add-controller")
    assert (code, err.strip()) == (1, ("You must supply the configuration file of the "
                                      "controller you are adding when using add-controller."))


# ------------------------------------------------------------------------------------------
# features


# Kafka 4.0's kafka-features.sh describe: every supported feature, sorted by name; a new cluster
# has each feature at its level for 4.0-IV3 (`features version-mapping`).
DESCRIBE_LINES = re.compile(
    r"Feature: group\.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
    r"FinalizedVersionLevel: 1\tEpoch: (?P<epoch>\d+)\n"
    r"Feature: kraft\.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
    r"FinalizedVersionLevel: 0\tEpoch: (?P=epoch)\n"
    r"Feature: metadata\.version\tSupportedMinVersion: 3\.3-IV3\t"
    r"SupportedMaxVersion: 4\.0-IV3\tFinalizedVersionLevel: (?P<level>\S+)\t"
    r"Epoch: (?P=epoch)\n"
    r"Feature: transaction\.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
    r"FinalizedVersionLevel: 1\tEpoch: (?P=epoch)\n")


def describe(capsys, node) -> tuple[str, int]:
    """(finalized metadata.version, epoch) as `features describe` prints them."""
    code, out, err = run(capsys, features, "--bootstrap-server", node.bootstrap, "describe")
    assert code == 0, err
    match = DESCRIBE_LINES.fullmatch(out)
    assert match, out
    return match["level"], int(match["epoch"])


def test_features_describe(node, capsys):
    level, epoch = describe(capsys, node)
    assert level == "4.0-IV3" and epoch > 0


def test_features_upgrade_and_downgrade(node, capsys):
    _, epoch = describe(capsys, node)
    # Upgrading to the level the cluster has is a success (the level is written again).
    code, out, err = run(capsys, features, "--bootstrap-server", node.bootstrap, "upgrade",
                         "--metadata", "4.0")
    assert (code, out, err) == (0, "metadata.version was upgraded to 25.\n", "")
    level, epoch_after = describe(capsys, node)
    assert level == "4.0-IV3" and epoch_after > epoch
    # 4.0-IV2 .. 4.0-IV3 did not change the metadata: a safe downgrade would lose nothing.
    code, out, _ = run(capsys, features, "--bootstrap-server", node.bootstrap, "downgrade",
                       "--feature", "metadata.version=23", "--dry-run")
    assert (code, out) == (0, "metadata.version can be downgraded to 23.\n")
    assert describe(capsys, node)[0] == "4.0-IV3"


def test_features_refusals(node, capsys):
    def refused(*args: str) -> str:
        code, out, err = run(capsys, features, "--bootstrap-server", node.bootstrap, *args)
        assert (code, err) == (1, "1 out of 1 operation(s) failed.\n")
        return out

    assert refused("upgrade", "--feature", "metadata.version=26") == (
        "Could not upgrade metadata.version to 26. Invalid update version 26 for feature "
        "metadata.version. Local controller 1 only supports versions 7-25\n")
    assert refused("downgrade", "--metadata", "4.0-IV0") == (
        "Could not downgrade metadata.version to 22. Invalid metadata.version 22. Refusing to "
        "perform the requested downgrade because it might delete metadata information.\n")
    assert refused("downgrade", "--metadata", "4.0-IV0", "--unsafe", "--dry-run") == (
        "Can not downgrade metadata.version to 22. Invalid metadata.version 22. Unsafe "
        "metadata downgrade is not supported in this version.\n")
    assert refused("disable", "--feature", "metadata.version") == (
        "Could not disable metadata.version. Invalid update version 0 for feature "
        "metadata.version. Local controller 1 only supports versions 7-25\n")
    assert refused("upgrade", "--feature", "transaction.version=2") == (
        "Could not upgrade transaction.version to 2. Invalid update version 2 for feature "
        "transaction.version. Local controller 1 only supports versions 0-1\n")
    code, _, err = run(capsys, features, "--bootstrap-server", node.bootstrap, "upgrade")
    assert (code, err) == (1, "You must specify at least one feature to upgrade\n")
    assert describe(capsys, node)[0] == "4.0-IV3"


def test_features_update_on_a_controller_listener(node, capsys):
    """Controller listeners serve UpdateFeatures (Kafka 4.0: listeners controller and broker),
    carried out by the active controller."""
    code, out, err = run(capsys, features, "--bootstrap-controller",
                         f"127.0.0.1:{node.controller_port}", "upgrade", "--metadata", "4.0")
    assert (code, err) == (0, "")
    assert out == "metadata.version was upgraded to 25.\n"


# ------------------------------------------------------------------------------------------
# dump-log --cluster-metadata-decoder


def test_dump_cluster_metadata_log(node, capsys):
    log = node.data_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    code, out, _ = run(capsys, dump_log, "--cluster-metadata-decoder", "--files", str(log))
    assert code == 0
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert re.fullmatch(
        r'\| offset: 0 CreateTime: \d+ keySize: 4 valueSize: \d+ sequence: -1 headerKeys: \[\] '
        r'LeaderChange: \{"version":0,"leaderId":1,"voters":\[\{"voterId":1\}\],'
        r'"grantingVoters":\[\{"voterId":1\}\]\}', records[0]), records[0]
    assert any(re.fullmatch(
        r'\| offset: \d+ CreateTime: \d+ keySize: -1 valueSize: \d+ sequence: -1 headerKeys: \[\] '
        r'payload: \{"type":"FEATURE_LEVEL_RECORD","version":0,"data":\{"name":'
        r'"metadata\.version","featureLevel":25\}\}', line) for line in records)
    topic = next(line for line in records if '"type":"TOPIC_RECORD"' in line)
    assert f'"name":"{TOPIC}"' in topic
    assert sum('"type":"PARTITION_RECORD"' in line and '"topicId":' in line
               for line in records) >= 2


def write_snapshot(directory: Path, end_offset: int, epoch: int) -> Path:
    """A KRaft snapshot file as Kafka writes one: a SnapshotHeader control batch, the records,
    a SnapshotFooter control batch."""
    header = m.SnapshotHeaderRecord(version=0, last_contained_log_timestamp=1_700_000_000_000)
    records = [m.encode_metadata_record(m.FeatureLevelRecord(name="metadata.version",
                                                             feature_level=20), 0),
               m.encode_metadata_record(m.ProducerIdsRecord(broker_id=1, broker_epoch=5,
                                                            next_producer_id=7000), 0)]
    footer = m.SnapshotFooterRecord(version=0)
    data = (build_control_record_batch(ControlRecordType.SNAPSHOT_HEADER, header.encode(0),
                                       1_700_000_000_000, partition_leader_epoch=epoch)
            + build_batch([(1_700_000_000_000, None, value) for value in records],
                          base_offset=1, partition_leader_epoch=epoch)
            + build_control_record_batch(ControlRecordType.SNAPSHOT_FOOTER, footer.encode(0),
                                         1_700_000_000_000, base_offset=3,
                                         partition_leader_epoch=epoch))
    path = directory / f"{end_offset:020d}-{epoch:010d}.checkpoint"
    path.write_bytes(data)
    return path


def test_dump_snapshot_file(tmp_path, capsys):
    snapshot = write_snapshot(tmp_path, 42, 3)
    code, out, _ = run(capsys, dump_log, "--cluster-metadata-decoder", "--files", str(snapshot))
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {snapshot}", "Snapshot end offset: 42, epoch: 3"]
    records = [line for line in lines if line.startswith("| ")]
    assert records[0].endswith(' SnapshotHeader {"version":0,'
                               '"lastContainedLogTimestamp":1700000000000}')
    assert records[1].endswith('payload: {"type":"FEATURE_LEVEL_RECORD","version":0,"data":'
                               '{"name":"metadata.version","featureLevel":20}}')
    assert '"type":"PRODUCER_IDS_RECORD"' in records[2]
    assert records[3].endswith(' SnapshotFooter {"version":0}')


# ------------------------------------------------------------------------------------------
# metadata-shell


@pytest.fixture(scope="module")
def metadata_copy(node, tmp_path_factory) -> Path:
    """A copy of the running node's metadata partition directory (the shell refuses the live
    log directory, whose .lock the node holds)."""
    copy = tmp_path_factory.mktemp("metadata-copy") / "__cluster_metadata-0"
    shutil.copytree(node.data_dir / "__cluster_metadata-0", copy)
    return copy


def test_shell_ls_and_cat(metadata_copy, node, capsys):
    segment = str(metadata_copy / "00000000000000000000.log")
    code, out, _ = run(capsys, metadata_shell, "--snapshot", segment, "ls", "/")
    assert (code, out) == (0, "image\nlocal\n")
    _, out, _ = run(capsys, metadata_shell, "--snapshot", segment, "ls", "/image")
    assert out.split() == ["acls", "clientQuotas", "cluster", "configs", "delegationToken",
                           "features", "producerIds", "provenance", "scram", "topics"]
    _, out, _ = run(capsys, metadata_shell, "-s", segment, "ls", "/image/topics/byName")
    assert TOPIC in out.split()
    _, out, _ = run(capsys, metadata_shell, "-s", segment, "cat",
                    "/image/features/metadataVersion")
    assert out == "4.0-IV3\n"
    _, out, _ = run(capsys, metadata_shell, "-s", segment, "ls", f"/image/topics/byName/{TOPIC}")
    assert out.split() == ["0", "1", "id", "name"]
    _, out, _ = run(capsys, metadata_shell, "-s", segment, "cat",
                    f"/image/topics/byName/{TOPIC}/0", f"/image/configs/TOPIC:{TOPIC}/retention.ms")
    assert re.fullmatch(
        r"PartitionRegistration\(replicas=\[1\], directories=\[AAAAAAAAAAAAAAAAAAAAAA\], "
        r"isr=\[1\], removingReplicas=\[\], addingReplicas=\[\], elr=\[\], lastKnownElr=\[\], "
        r"leader=1, leaderRecoveryState=RECOVERED, leaderEpoch=0, partitionEpoch=0\)\n"
        r"123456\n", out), out
    _, out, _ = run(capsys, metadata_shell, "-s", segment, "cat", "/image/cluster/brokers/1")
    assert out.startswith("BrokerRegistration(id=1, epoch=")
    assert (f"listeners=[Endpoint(listenerName='PLAINTEXT', securityProtocol=PLAINTEXT, "
            f"host='127.0.0.1', port={node.port})]") in out
    _, out, _ = run(capsys, metadata_shell, "-s", segment, "cat", "/image/topics")
    assert out == "cat: /image/topics: Is a directory\n"


def test_shell_directory_find_and_tree(metadata_copy, capsys):
    code, out, _ = run(capsys, metadata_shell, "--snapshot", str(metadata_copy), "find",
                       "/image/features")
    assert (code, out) == (0, ("/image/features\n/image/features/finalized_group.version\n"
                              "/image/features/finalized_transaction.version\n"
                              "/image/features/metadataVersion\n"))
    _, out, _ = run(capsys, metadata_shell, "-s", str(metadata_copy), "tree", "/image/features")
    assert out == ("finalized_group.version:\n  1\nfinalized_transaction.version:\n  1\n"
                   "metadataVersion:\n  4.0-IV3\n")
    # Globs, as Kafka's shell expands them (ls of a file prints its name, cat its content).
    _, out, _ = run(capsys, metadata_shell, "-s", str(metadata_copy), "cat",
                    "/image/topics/byName/*/name")
    assert TOPIC in out.split()
    # cd and pwd are shell-only in Kafka: not accepted on the command line.
    _, out, _ = run(capsys, metadata_shell, "-s", str(metadata_copy), "pwd")
    assert out == ("argument command: invalid choice: 'pwd' (choose from 'cat', 'find', 'ls', "
                   "'tree')\n")


def test_shell_refuses_a_live_log_directory(node, capsys):
    segment = node.data_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    code, _, err = run(capsys, metadata_shell, "--snapshot", str(segment), "ls", "/")
    assert code == 1
    assert err.startswith(f"Unexpected error: Unable to lock {node.data_dir}. Please ensure "
                          "that no broker or controller process is using this directory")


def test_shell_snapshot_and_interactive_prompt(tmp_path):
    snapshot = write_snapshot(tmp_path, 3, 2)
    commands = "cd /image/producerIds\npwd\nls\ncat nextProducerId\ncat /image/provenance\nexit\n"
    result = subprocess.run([*ODRADEK, "metadata-shell", "--snapshot", str(snapshot)],
                            input=commands, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "Loading...\nStarting...\n[ Kafka Metadata Shell ]\n"
        ">> >> /image/producerIds\n>> nextProducerId\n>> 7000\n"
        ">> offset 3, epoch 2, time 2023-11-14T22:13:20Z[UTC]\n>> ")
