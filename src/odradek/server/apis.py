"""Which APIs this broker serves, at which versions, and the handler of each.

Versions follow Kafka: every version of the 3.8 specs, except the oldest Produce/Fetch/
ListOffsets versions that Kafka 4.0 dropped too (they need message-format conversion).
An API missing here is not advertised in ApiVersions; a client that sends it anyway has its
connection closed, as Kafka does for requests its listener does not enable. Controller listeners
enable only `CONTROLLER_APIS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from odradek.protocol.messages import API_BY_KEY
from odradek.server.handlers import admin, fetch, groups, metadata, produce, producer_ids, sasl

Handler = Callable[..., Any]

# api key -> (handler, lowest version served)
HANDLERS: dict[int, tuple[Handler, int]] = {
    0: (produce.produce, 3),
    1: (fetch.fetch, 4),
    2: (fetch.list_offsets, 1),
    3: (metadata.metadata, 0),
    8: (groups.offset_commit, 0),
    9: (groups.offset_fetch, 0),
    10: (groups.find_coordinator, 0),
    11: (groups.join_group, 0),
    12: (groups.heartbeat, 0),
    13: (groups.leave_group, 0),
    14: (groups.sync_group, 0),
    15: (groups.describe_groups, 0),
    16: (groups.list_groups, 0),
    17: (sasl.sasl_handshake, 0),
    18: (metadata.api_versions, 0),
    19: (admin.create_topics, 0),
    20: (admin.delete_topics, 0),
    21: (admin.delete_records, 0),
    22: (producer_ids.init_producer_id, 0),
    23: (fetch.offset_for_leader_epoch, 0),
    32: (admin.describe_configs, 0),
    33: (admin.alter_configs, 0),
    35: (admin.describe_log_dirs, 0),
    36: (sasl.sasl_authenticate, 0),
    37: (admin.create_partitions, 0),
    42: (groups.delete_groups, 0),
    44: (admin.incremental_alter_configs, 0),
    47: (groups.offset_delete, 0),
    60: (metadata.describe_cluster, 0),
    75: (metadata.describe_topic_partitions, 0),
}

# APIs a controller listener answers (the rest belong to broker listeners).
CONTROLLER_APIS = frozenset({17, 18, 36, 60})
BROKER_LISTENER = "broker"
CONTROLLER_LISTENER = "controller"


class ApiTable:
    def __init__(self, extra: dict[int, tuple[Handler, int]] | None = None) -> None:
        self.handlers = dict(HANDLERS) | (extra or {})
        self.versions: dict[int, tuple[int, int]] = {
            key: (low, API_BY_KEY[key].max_version) for key, (_h, low) in self.handlers.items()
        }

    def advertised(self, listener_kind: str) -> dict[int, tuple[int, int]]:
        """The APIs and versions a listener of this kind ("broker" or "controller") serves."""
        if listener_kind == CONTROLLER_LISTENER:
            return {k: v for k, v in self.versions.items() if k in CONTROLLER_APIS}
        return self.versions

    def lookup(self, api_key: int, version: int,
               listener_kind: str = BROKER_LISTENER) -> Handler | None:
        entry = self.handlers.get(api_key)
        if entry is None:
            return None
        if listener_kind == CONTROLLER_LISTENER and api_key not in CONTROLLER_APIS:
            return None
        low, high = self.versions[api_key]
        return entry[0] if low <= version <= high else None
