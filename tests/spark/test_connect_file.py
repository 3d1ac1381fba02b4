"""The FileStreamSource reader (a Spark streaming source with byte positions as offsets), the
file sink's append record, and the worker's config checks."""

from __future__ import annotations

import json
import subprocess

import pytest
from broker_process import ODRADEK

from odradek.spark.connect import ConnectConfigError, StandaloneWorker
from odradek.spark.connect.connectors import SinkProgress
from odradek.spark.connect.file_source import FORMAT, FileStreamDataSource

JSON = "org.apache.kafka.connect.json.JsonConverter"
WORKER = {"bootstrap.servers": "127.0.0.1:9", "key.converter": JSON, "value.converter": JSON,
          "offset.storage.file.filename": "/tmp/odradek-test.offsets"}
SOURCE = {"name": "src", "connector.class": "FileStreamSource", "file": "in.txt",
          "topic": "t"}


def read_available(spark, path, checkpoint, **options):
    """One Trigger.AvailableNow run from `checkpoint`: the lines of each micro-batch."""
    spark.dataSource.register(FileStreamDataSource)
    batches = []
    reader = spark.readStream.format(FORMAT).option("file", str(path))
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (reader.load().writeStream
             .foreachBatch(lambda df, _id: batches.append([r.value for r in df.collect()]))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120) and query.exception() is None
    return batches


def test_file_source_tails_lines_and_resumes_from_its_checkpoint(spark, tmp_path):
    path, checkpoint = tmp_path / "in.txt", tmp_path / "checkpoint"
    path.write_bytes("a\r\nb\rc\né ü\npart".encode())
    assert read_available(spark, path, checkpoint) == [["a", "b", "c", "é ü"]]
    assert read_available(spark, path, checkpoint) == []  # nothing new, nothing again
    with open(path, "ab") as file:
        file.write(b"ial\nx\r")  # the final "\r" may be the start of "\r\n": it waits
    assert read_available(spark, path, checkpoint) == [["partial"]]
    with open(path, "ab") as file:
        file.write(b"\n" + b"".join(b"line %d\n" % i for i in range(6)))
    # at most maxBytesPerBatch of lines per micro-batch (more for a longer line)
    batches = read_available(spark, path, checkpoint, maxBytesPerBatch="14")
    assert batches == [["x", "line 0"], ["line 1", "line 2"], ["line 3", "line 4"], ["line 5"]]


def test_sink_progress_writes_a_replayed_batch_once(tmp_path):
    target, record = tmp_path / "out.txt", tmp_path / "checkpoint" / "progress.json"
    SinkProgress(record, str(target)).append(0, ["a", "b"])
    assert not SinkProgress(record, str(target)).written(1)
    assert SinkProgress(record, str(target)).written(0)
    # batch 1 dies halfway through its append ...
    progress = SinkProgress(record, str(target))
    progress._save({"file": str(target), "batch": 1, "size_before": target.stat().st_size,
                    "done": False})
    with open(target, "a") as file:
        file.write("c\nd")
    # ... and Spark replays it: the partial append is cut, the batch written whole once
    replay = SinkProgress(record, str(target))
    assert not replay.written(1)
    replay.append(1, ["c", "d", "e"])
    assert target.read_text() == "a\nb\nc\nd\ne\n"
    assert SinkProgress(record, str(target)).written(1)


def test_worker_config_errors():
    with pytest.raises(ConnectConfigError, match='"offset.storage.file.filename"'):
        StandaloneWorker({k: v for k, v in WORKER.items()
                          if k != "offset.storage.file.filename"}, [SOURCE])
    with pytest.raises(ConnectConfigError, match='"value.converter"'):
        StandaloneWorker({k: v for k, v in WORKER.items() if k != "value.converter"}, [SOURCE])
    with pytest.raises(ConnectConfigError, match="Class Avro could not be found"):
        StandaloneWorker({**WORKER, "value.converter": "Avro"}, [SOURCE])
    with pytest.raises(ConnectConfigError, match="requires definition of a single topic"):
        StandaloneWorker(WORKER, [{**SOURCE, "topic": "a,b"}])
    with pytest.raises(ConnectConfigError, match="Must configure one of topics or topics.regex"):
        StandaloneWorker(WORKER, [{"name": "s", "connector.class": "FileStreamSink"}])
    with pytest.raises(ConnectConfigError, match="mutually exclusive"):
        StandaloneWorker(WORKER, [{"name": "s", "connector.class": "FileStreamSink",
                                   "topics": "a", "topics.regex": "b.*"}])
    with pytest.raises(ConnectConfigError, match="Connector src already exists"):
        StandaloneWorker(WORKER, [SOURCE, SOURCE])
    with pytest.raises(ConnectConfigError, match="which name matches Nope"):
        StandaloneWorker(WORKER, [{**SOURCE, "connector.class": "Nope"}])
    worker = StandaloneWorker({**WORKER, "value.converter.schemas.enable": "false"},
                              [SOURCE, {"name": "sink", "connector.class":
                                        "org.apache.kafka.connect.file.FileStreamSinkConnector",
                                        "topics": "t", "value.converter": "StringConverter"}])
    source, sink = worker.connectors
    assert source.settings.value_converter.schemas_enabled is False
    assert source.settings.checkpoint == "/tmp/odradek-test.offsets.checkpoints/src"
    assert type(sink.settings.value_converter).__name__ == "StringConverter"


def test_cli_usage_and_config_errors(tmp_path):
    usage = subprocess.run([*ODRADEK, "connect-standalone"], capture_output=True, text=True,
                           timeout=60)
    assert usage.returncode == 1
    assert usage.stderr.strip().endswith(
        "Usage: ConnectStandalone worker.properties [connector1.properties connector2.json ...]")
    worker = tmp_path / "worker.properties"
    worker.write_text(f"key.converter={JSON}\nvalue.converter={JSON}\n")
    bad = subprocess.run([*ODRADEK, "connect-standalone", str(worker)], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1
    assert 'Missing required configuration "offset.storage.file.filename"' in bad.stderr
    worker.write_text(f"key.converter={JSON}\nvalue.converter={JSON}\n"
                      f"offset.storage.file.filename={tmp_path / 'offsets'}\n")
    connector = tmp_path / "source.json"
    connector.write_text(json.dumps({"name": "src", "config": {
        "connector.class": "FileStreamSource", "file": "in.txt", "topic": "a,b"}}))
    bad = subprocess.run([*ODRADEK, "connect-standalone", str(worker), str(connector)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert "'topic' in FileStreamSourceConnector configuration requires definition of a " \
           "single topic" in bad.stderr
