"""Odradek's storage engine: Kafka's segmented partition log and the log manager.

Synchronous, thread-safe for one writer plus concurrent readers; knows nothing of the network.
"""

from odradek.storage.checkpoint import (
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    read_meta_properties,
    write_meta_properties,
)
from odradek.storage.config import TOPIC_CONFIGS, ConfigDef, ConfigType, LogConfig
from odradek.storage.epoch import LeaderEpochFileCache
from odradek.storage.index import OffsetIndex, TimeIndex
from odradek.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    Log,
    TimestampAndOffset,
)
from odradek.storage.manager import LogDirInfo, LogManager, PartitionDirInfo
from odradek.storage.segment import FetchData, LogSegment
from odradek.storage.validator import AppendOrigin

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "TOPIC_CONFIGS",
    "AppendInfo",
    "AppendOrigin",
    "ConfigDef",
    "ConfigType",
    "FetchData",
    "LeaderEpochCheckpointFile",
    "LeaderEpochFileCache",
    "Log",
    "LogConfig",
    "LogDirInfo",
    "LogManager",
    "LogSegment",
    "OffsetCheckpointFile",
    "OffsetIndex",
    "PartitionDirInfo",
    "PartitionMetadataFile",
    "TimeIndex",
    "TimestampAndOffset",
    "read_meta_properties",
    "write_meta_properties",
]
