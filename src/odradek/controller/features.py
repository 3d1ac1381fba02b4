"""Feature flags (KIP-584, KIP-778, KIP-1022): UpdateFeatures as Kafka's FeatureControlManager
does it, with Kafka 4.0's metadata.version levels and features.

Pure: the metadata image and the requested updates in, the per-feature results and the
FeatureLevelRecords to commit out. The active controller (`QuorumController.update_features`)
commits the records.

Kafka 3.8's rules, per feature (each feature gets its own result; the records of those that
succeed are committed together even when others fail):

- an unknown upgrade type fails; a level below 0 fails;
- the level must be supported by the local controller and by every registered broker (a feature
  a node does not know is supported at level 0 only): otherwise "Local controller N only
  supports versions A-B" / "brokerN does not support this feature." (Kafka 3.8 spells the
  broker without a space);
- a lower level needs a downgrade type, a higher one the upgrade type;
- metadata.version cannot go below 3.3-IV0 (the first level the log can record), and a
  downgrade is refused when any level between the two changed the metadata format (Kafka 3.8
  does not implement lossy downgrades: "Unsafe metadata downgrade is not supported in this
  version."); a downgrade across levels that changed nothing is written;
- the record of a success is written even when the level does not change (as Kafka does);
- a feature level's dependencies (Kafka 4.0's Feature.validateVersion: kraft.version 1 needs
  metadata.version 3.9-IV0) must hold once every update of the request is done.

Level 0 of a feature other than metadata.version removes it from the finalized features.

Controller registrations (KIP-919) are not part of Odradek's metadata; as Kafka does before
3.7-IV0, only the local controller and the registered brokers are checked. In a combined
cluster every controller is also a registered broker.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from odradek.controller.controller import OpResult
from odradek.metadata.image import METADATA_VERSION_FEATURE, MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.controller.features")

# UpdateFeatures' upgrade types (FeatureUpdate.UpgradeType); anything else is UNKNOWN.
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3

#: Kafka 3.8's KRaft metadata.version levels, from level 1: (name, did the metadata format
#: change at this level) — MetadataVersion's didMetadataChange, which decides whether a
#: downgrade loses information.
METADATA_VERSIONS: tuple[tuple[str, bool], ...] = (
    ("3.0-IV1", True), ("3.1-IV0", False), ("3.2-IV0", True), ("3.3-IV0", False),
    ("3.3-IV1", True), ("3.3-IV2", True), ("3.3-IV3", True), ("3.4-IV0", True),
    ("3.5-IV0", False), ("3.5-IV1", False), ("3.5-IV2", True), ("3.6-IV0", False),
    ("3.6-IV1", True), ("3.6-IV2", True), ("3.7-IV0", True), ("3.7-IV1", False),
    ("3.7-IV2", True), ("3.7-IV3", False), ("3.7-IV4", False), ("3.8-IV0", False),
    ("3.9-IV0", False), ("4.0-IV0", False), ("4.0-IV1", True), ("4.0-IV2", False),
    ("4.0-IV3", False),
)
#: Kafka 4.0's MetadataVersion.MINIMUM_VERSION (3.3-IV3): the lowest level a 4.0 node
#: supports, and the lowest UpdateFeatures may set.
MINIMUM_KRAFT_VERSION = 7
MINIMUM_BOOTSTRAP_VERSION = MINIMUM_KRAFT_VERSION
LATEST_METADATA_VERSION = len(METADATA_VERSIONS)  # 25, 4.0-IV3

KRAFT_VERSION_FEATURE = "kraft.version"
GROUP_VERSION_FEATURE = "group.version"
TRANSACTION_VERSION_FEATURE = "transaction.version"

@dataclass(frozen=True)
class FeatureVersion:
    """One level of a feature other than metadata.version (Kafka's FeatureVersion): the
    metadata.version from which formatting defaults to it, and the levels of other features it
    needs."""

    level: int
    bootstrap_metadata_version: int
    dependencies: Mapping[str, int] = field(default_factory=dict)


#: The levels of each feature besides metadata.version this software knows, in Kafka 4.0's
#: Feature enum order (what version-mapping prints): kraft.version 1 (KIP-853 dynamic quorums)
#: from 3.9-IV0 and needing it; transaction.version 1 from 4.0-IV2; group.version 1 (KIP-848
#: consumer groups) from 4.0-IV0. Kafka 4.0 also has transaction.version 2 (KIP-890 part 2: an
#: epoch bump at every transaction end), which Odradek's coordinator does not implement, so
#: its table stops at 1 (level 1 only changes the coordinator's own records).
FEATURE_VERSIONS: Mapping[str, tuple[FeatureVersion, ...]] = {
    KRAFT_VERSION_FEATURE: (FeatureVersion(0, 1),
                            FeatureVersion(1, 21, {METADATA_VERSION_FEATURE: 21})),
    TRANSACTION_VERSION_FEATURE: (FeatureVersion(0, 1), FeatureVersion(1, 24)),
    GROUP_VERSION_FEATURE: (FeatureVersion(0, MINIMUM_KRAFT_VERSION), FeatureVersion(1, 22)),
}

#: The features this software supports, as (min, max) levels: metadata.version 3.3-IV3 to
#: 4.0-IV3 and the levels of FEATURE_VERSIONS.
#: Features whose lowest level is 0 are left out of ApiVersions v0-v3 (KAFKA-17011).
SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = {
    **{name: (levels[0].level, levels[-1].level)
       for name, levels in sorted(FEATURE_VERSIONS.items())},
    METADATA_VERSION_FEATURE: (MINIMUM_KRAFT_VERSION, LATEST_METADATA_VERSION),
}


def feature_version(name: str, level: int) -> FeatureVersion:
    """Kafka's Feature.fromFeatureLevel; ValueError for a level the feature does not define."""
    for version in FEATURE_VERSIONS.get(name, ()):
        if version.level == level:
            return version
    raise ValueError(f"No feature:{name} with feature level {level}")


def default_level(name: str, metadata_version: int) -> int:
    """Kafka's Feature.defaultLevel: the highest level whose bootstrap metadata.version is at
    or below `metadata_version`."""
    chosen = FEATURE_VERSIONS[name][0].level
    for version in FEATURE_VERSIONS[name]:
        if version.bootstrap_metadata_version > metadata_version:
            break
        chosen = version.level
    return chosen


def bootstrap_feature_levels(metadata_version: int) -> dict[str, int]:
    """The FeatureLevelRecords a cluster formatted at `metadata_version` starts with besides
    metadata.version: each feature's default level, those above 0 (kraft.version is the
    quorum's own, kept in its snapshot's control records, as Kafka's)."""
    levels = {name: default_level(name, metadata_version) for name in FEATURE_VERSIONS
              if name != KRAFT_VERSION_FEATURE}
    return {name: level for name, level in levels.items() if level > 0}


def dependency_error(name: str, level: int, levels: Mapping[str, int]) -> str | None:
    """Kafka's Feature.validateVersion: why `name` cannot be at `level` given the (proposed)
    `levels` of every feature, metadata.version included; None when it can. A feature outside
    the table has no dependencies."""
    if name not in FEATURE_VERSIONS:
        return None
    metadata_version = levels.get(METADATA_VERSION_FEATURE)
    if level >= 1 and (metadata_version is None or metadata_version < MINIMUM_KRAFT_VERSION):
        return (f"{name} could not be set to {level} because it depends on metadata.version="
                f"{MINIMUM_KRAFT_VERSION} ({metadata_version_name(MINIMUM_KRAFT_VERSION)})")
    try:
        version = feature_version(name, level)
    except ValueError as exc:
        return str(exc)
    for needed, needed_level in version.dependencies.items():
        have = levels.get(needed)
        if have is None or have < needed_level:
            return (f"{name} could not be set to {level} because it depends on {needed} "
                    f"level {needed_level}")
    return None


#: Feature levels a new cluster starts with besides metadata.version when storage format left
#: none (a directory formatted without a bootstrap file): the defaults of the latest
#: metadata.version.
BOOTSTRAP_FEATURE_LEVELS: Mapping[str, int] = bootstrap_feature_levels(LATEST_METADATA_VERSION)

_DISABLED = (0, 0)  # the range of a feature a node does not know
_SHORT_MAX = 32767


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """One item of UpdateFeatures: set `name` to `level` (0: remove it)."""

    name: str
    level: int
    upgrade_type: int = UPGRADE


def upgrade_type_of(version: int, allow_downgrade: bool, upgrade_type: int) -> int:
    """The upgrade type an UpdateFeatures item asks for: v0 has only AllowDowngrade, which
    means a safe downgrade (KIP-778)."""
    if version == 0:
        return SAFE_DOWNGRADE if allow_downgrade else UPGRADE
    return upgrade_type


def metadata_version_name(level: int) -> str:
    return METADATA_VERSIONS[level - 1][0]


def metadata_changed_between(low: int, high: int) -> bool:
    """Kafka's MetadataVersion.checkIfMetadataChanged: did any level in (low, high] change
    the metadata format?"""
    low, high = min(low, high), max(low, high)
    return any(changed for _name, changed in METADATA_VERSIONS[low:high])


def range_text(low: int, high: int) -> str:
    """Kafka's VersionRange.toString."""
    if low == high:
        return str(low)
    if high == _SHORT_MAX:
        return f"{low}+"
    return f"{low}-{high}"


def _reason_not_supported(level: int, who: str, supported: tuple[int, int]) -> str | None:
    low, high = supported
    if low <= level <= high:
        return None
    if high == 0:
        return f"{who} does not support this feature."
    return f"{who} only supports versions {range_text(low, high)}"


def _invalid_update(name: str, level: int, message: str) -> OpResult:
    text = f"Invalid update version {level} for feature {name}. {message}"
    log.warning("%s", text)
    return OpResult.fail(ErrorCode.INVALID_UPDATE_VERSION, text)


def _invalid_metadata_version(level: int, message: str) -> OpResult:
    text = f"Invalid metadata.version {level}. {message}"
    log.warning("%s", text)
    return OpResult.fail(ErrorCode.INVALID_UPDATE_VERSION, text)


def _not_supported(image: MetadataImage, name: str, level: int, node_id: int,
                   local_supported: Mapping[str, tuple[int, int]]) -> str | None:
    reason = _reason_not_supported(level, f"Local controller {node_id}",
                                   local_supported.get(name, _DISABLED))
    if reason is not None:
        return reason
    for broker_id in sorted(image.brokers):
        reason = _reason_not_supported(level, f"broker{broker_id}",
                                       image.brokers[broker_id].features.get(name, _DISABLED))
        if reason is not None:
            return reason
    return None


def _update_metadata_version(current: int, level: int, upgrade_type: int) -> OpResult:
    """The checks only metadata.version has (Kafka's updateMetadataVersion)."""
    if not 1 <= level <= len(METADATA_VERSIONS):
        return _invalid_metadata_version(level, "Unknown metadata.version.")
    if level < MINIMUM_BOOTSTRAP_VERSION:
        return _invalid_metadata_version(
            level, "Unable to set a metadata.version less than "
                   f"{metadata_version_name(MINIMUM_BOOTSTRAP_VERSION)}")
    if level < current:
        if metadata_changed_between(level, current):
            if upgrade_type == UNSAFE_DOWNGRADE:
                return _invalid_metadata_version(
                    level, "Unsafe metadata downgrade is not supported in this version.")
            return _invalid_metadata_version(
                level, "Refusing to perform the requested downgrade because it might delete "
                       "metadata information.")
        log.warning("Downgrading metadata.version from %s to %s.",
                    _level_name(current), metadata_version_name(level))
    else:
        log.warning("Upgrading metadata.version from %s to %s.", _level_name(current),
                    metadata_version_name(level))
    return OpResult()


def _level_name(level: int) -> str:
    return metadata_version_name(level) if 1 <= level <= len(METADATA_VERSIONS) else str(level)


def _update_feature(image: MetadataImage, update: FeatureUpdate, node_id: int,
                    local_supported: Mapping[str, tuple[int, int]],
                    proposed: Mapping[str, int]) -> OpResult:
    name, level = update.name, update.level
    if update.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return _invalid_update(name, level,
                               "The controller does not support the given upgrade type.")
    current = image.features.get(name, 0)
    if level < 0:
        return _invalid_update(name, level, "A feature version cannot be less than 0.")
    reason = _not_supported(image, name, level, node_id, local_supported)
    if reason is not None:
        return _invalid_update(name, level, reason)
    if level < current and update.upgrade_type == UPGRADE:
        return _invalid_update(name, level,
                               "Can't downgrade the version of this feature without setting "
                               "the upgrade type to either safe or unsafe downgrade.")
    if level > current and update.upgrade_type != UPGRADE:
        return _invalid_update(name, level, "Can't downgrade to a newer version.")
    if name == METADATA_VERSION_FEATURE:
        return _update_metadata_version(current, level, update.upgrade_type)
    reason = dependency_error(name, level, proposed)
    if reason is not None:
        return _invalid_update(name, level, reason)
    return OpResult()


def update_features(image: MetadataImage, updates: Sequence[FeatureUpdate], *, node_id: int,
                    local_supported: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES,
                    validate_only: bool = False) -> tuple[dict[str, OpResult], list[Any]]:
    """UpdateFeatures on `image`, as the controller `node_id` (which supports
    `local_supported`) carries it out: a result per feature, in name order, and the records to
    commit (none when validate_only). A feature named twice takes its last update."""
    by_name = {update.name: update for update in updates}
    # What the features would be with every update done: a feature's dependencies are checked
    # against these (Kafka's proposedUpdatedVersions).
    proposed = {**image.features, **{name: u.level for name, u in by_name.items()}}
    results: dict[str, OpResult] = {}
    records: list[Any] = []
    for name in sorted(by_name):
        update = by_name[name]
        result = _update_feature(image, update, node_id, local_supported, proposed)
        results[name] = result
        if result.error == ErrorCode.NONE:
            records.append(m.FeatureLevelRecord(name=name, feature_level=update.level))
    return results, [] if validate_only else records


__all__ = [
    "BOOTSTRAP_FEATURE_LEVELS",
    "FEATURE_VERSIONS",
    "GROUP_VERSION_FEATURE",
    "KRAFT_VERSION_FEATURE",
    "LATEST_METADATA_VERSION",
    "METADATA_VERSIONS",
    "MINIMUM_BOOTSTRAP_VERSION",
    "MINIMUM_KRAFT_VERSION",
    "SAFE_DOWNGRADE",
    "SUPPORTED_FEATURES",
    "TRANSACTION_VERSION_FEATURE",
    "UNSAFE_DOWNGRADE",
    "UPGRADE",
    "FeatureUpdate",
    "FeatureVersion",
    "bootstrap_feature_levels",
    "default_level",
    "dependency_error",
    "feature_version",
    "metadata_changed_between",
    "update_features",
    "upgrade_type_of",
]
