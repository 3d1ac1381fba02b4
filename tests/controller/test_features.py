"""UpdateFeatures as Kafka 3.8's FeatureControlManager decides it: images built by replaying
records, results and records checked, records replayed."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from odradek.controller.controller import replay_all
from odradek.controller.features import (
    LATEST_METADATA_VERSION,
    METADATA_VERSIONS,
    SAFE_DOWNGRADE,
    SUPPORTED_FEATURES,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    FeatureUpdate,
    metadata_changed_between,
    update_features,
    upgrade_type_of,
)
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

MV = "metadata.version"
NODE = 1


def image_with(level: int = 20, brokers: Mapping[int, Mapping[str, tuple[int, int]]] | None = None,
               extra: Mapping[str, int] | None = None) -> MetadataImage:
    """An image at metadata.version `level` with brokers supporting these features."""
    if brokers is None:
        brokers = {NODE: SUPPORTED_FEATURES}
    records: list[Any] = [m.FeatureLevelRecord(name=MV, feature_level=level)]
    records += [m.FeatureLevelRecord(name=n, feature_level=v) for n, v in (extra or {}).items()]
    for broker_id, features in brokers.items():
        records.append(m.RegisterBrokerRecord(
            broker_id=broker_id, incarnation_id=uuid.uuid4(), broker_epoch=10 + broker_id,
            features=[m.RegisterBrokerRecord.BrokerFeature(name=n, min_supported_version=lo,
                                                           max_supported_version=hi)
                      for n, (lo, hi) in features.items()]))
    return replay_all(EMPTY_IMAGE, records, offset=41)


def run(image: MetadataImage, *updates: FeatureUpdate, validate_only: bool = False,
        supported: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES):
    results, records = update_features(image, updates, node_id=NODE, local_supported=supported,
                                       validate_only=validate_only)
    return {name: (r.error, r.message) for name, r in results.items()}, records


def ok() -> tuple[ErrorCode, None]:
    return ErrorCode.NONE, None


def invalid(message: str) -> tuple[ErrorCode, str]:
    return ErrorCode.INVALID_UPDATE_VERSION, message


def test_the_table_is_kafka_4_0():
    assert LATEST_METADATA_VERSION == 25 and METADATA_VERSIONS[-1] == ("4.0-IV3", False)
    assert METADATA_VERSIONS[20:] == (("3.9-IV0", False), ("4.0-IV0", False),
                                      ("4.0-IV1", True), ("4.0-IV2", False), ("4.0-IV3", False))
    assert SUPPORTED_FEATURES == {MV: (7, 25), "kraft.version": (0, 1),
                                  "group.version": (0, 1), "transaction.version": (0, 1)}
    assert [name for name, _ in METADATA_VERSIONS[:4]] == ["3.0-IV1", "3.1-IV0", "3.2-IV0",
                                                            "3.3-IV0"]


def test_upgrade_to_the_current_level_succeeds_and_writes_the_record():
    results, records = run(image_with(20), FeatureUpdate(MV, 20))
    assert results == {MV: ok()}
    assert records == [m.FeatureLevelRecord(name=MV, feature_level=20)]


def test_upgrade_writes_the_new_level():
    image = image_with(15)
    results, records = run(image, FeatureUpdate(MV, 20))
    assert results == {MV: ok()}
    assert replay_all(image, records).metadata_version == 20


def test_validate_only_checks_but_writes_nothing():
    results, records = run(image_with(15), FeatureUpdate(MV, 20), validate_only=True)
    assert results == {MV: ok()} and records == []
    results, records = run(image_with(25), FeatureUpdate(MV, 26), validate_only=True)
    assert results[MV][0] == ErrorCode.INVALID_UPDATE_VERSION and records == []


def test_a_level_the_local_controller_does_not_support():
    assert run(image_with(25), FeatureUpdate(MV, 26))[0] == {MV: invalid(
        "Invalid update version 26 for feature metadata.version. Local controller 1 only "
        "supports versions 7-25")}
    # level 0 would remove metadata.version: outside the supported range too
    assert run(image_with(20), FeatureUpdate(MV, 0, SAFE_DOWNGRADE))[0] == {MV: invalid(
        "Invalid update version 0 for feature metadata.version. Local controller 1 only "
        "supports versions 7-25")}


def test_an_unknown_feature_is_not_supported():
    results, records = run(image_with(20), FeatureUpdate("no.such.feature", 1))
    assert results == {"no.such.feature": invalid(
        "Invalid update version 1 for feature no.such.feature. Local controller 1 does not "
        "support this feature.")}
    assert records == []


def test_disabling_an_unknown_feature_is_a_no_op_success():
    """Every node supports an unknown feature at level 0, so Kafka writes its removal."""
    image = image_with(20)
    results, records = run(image, FeatureUpdate("no.such.feature", 0, SAFE_DOWNGRADE))
    assert results == {"no.such.feature": ok()}
    assert replay_all(image, records).features == image.features


def test_every_registered_broker_must_support_the_level():
    image = image_with(15, brokers={1: {MV: (1, 20)}, 2: {MV: (1, 17)}, 3: {}})
    assert run(image, FeatureUpdate(MV, 18))[0] == {MV: invalid(
        "Invalid update version 18 for feature metadata.version. broker2 only supports "
        "versions 1-17")}
    assert run(image, FeatureUpdate(MV, 16))[0] == {MV: invalid(
        "Invalid update version 16 for feature metadata.version. broker3 does not support "
        "this feature.")}


def test_a_feature_the_brokers_support_but_the_controller_does_not():
    image = image_with(20, brokers={1: {MV: (1, 20), "x.version": (1, 3)}})
    assert run(image, FeatureUpdate("x.version", 2))[0]["x.version"][1].endswith(
        "Local controller 1 does not support this feature.")
    supported = {**SUPPORTED_FEATURES, "x.version": (1, 2)}
    assert run(image, FeatureUpdate("x.version", 3), supported=supported)[0]["x.version"][1] \
        .endswith("Local controller 1 only supports versions 1-2")
    results, records = run(image, FeatureUpdate("x.version", 2), supported=supported)
    assert results == {"x.version": ok()}
    assert replay_all(image, records).features["x.version"] == 2


def test_other_features_go_down_with_a_downgrade_type_and_level_0_removes_them():
    supported = {**SUPPORTED_FEATURES, "x.version": (1, 3)}
    image = image_with(20, brokers={1: {MV: (1, 20), "x.version": (0, 3)}},
                       extra={"x.version": 2})
    assert run(image, FeatureUpdate("x.version", 1), supported=supported)[0]["x.version"] == \
        invalid("Invalid update version 1 for feature x.version. Can't downgrade the version of "
                "this feature without setting the upgrade type to either safe or unsafe "
                "downgrade.")
    assert run(image, FeatureUpdate("x.version", 3, SAFE_DOWNGRADE),
               supported=supported)[0]["x.version"] == invalid(
        "Invalid update version 3 for feature x.version. Can't downgrade to a newer version.")
    supported_from_0 = {**SUPPORTED_FEATURES, "x.version": (0, 3)}
    results, records = run(image, FeatureUpdate("x.version", 0, UNSAFE_DOWNGRADE),
                           supported=supported_from_0)
    assert results == {"x.version": ok()}
    assert "x.version" not in replay_all(image, records).features


def test_metadata_version_downgrade_needs_a_downgrade_type():
    assert run(image_with(20), FeatureUpdate(MV, 19))[0] == {MV: invalid(
        "Invalid update version 19 for feature metadata.version. Can't downgrade the version "
        "of this feature without setting the upgrade type to either safe or unsafe "
        "downgrade.")}
    assert run(image_with(19), FeatureUpdate(MV, 20, SAFE_DOWNGRADE))[0] == {MV: invalid(
        "Invalid update version 20 for feature metadata.version. Can't downgrade to a newer "
        "version.")}


def test_safe_metadata_version_downgrade_when_nothing_changed_between_the_levels():
    # 3.7-IV3, 3.7-IV4 and 3.8-IV0 did not change the metadata: 20 -> 17 loses nothing
    image = image_with(20)
    for level in (19, 18, 17):
        results, records = run(image, FeatureUpdate(MV, level, SAFE_DOWNGRADE))
        assert results == {MV: ok()}
        assert replay_all(image, records).metadata_version == level
    # an unsafe downgrade type is fine too when nothing would be lost
    assert run(image, FeatureUpdate(MV, 18, UNSAFE_DOWNGRADE))[0] == {MV: ok()}


def test_metadata_version_downgrade_that_would_lose_metadata_is_refused():
    # 3.7-IV2 (17) added JBOD metadata: going to 16 would drop it
    image = image_with(20)
    assert run(image, FeatureUpdate(MV, 16, SAFE_DOWNGRADE)) == ({MV: invalid(
        "Invalid metadata.version 16. Refusing to perform the requested downgrade because it "
        "might delete metadata information.")}, [])
    assert run(image, FeatureUpdate(MV, 16, UNSAFE_DOWNGRADE))[0] == {MV: invalid(
        "Invalid metadata.version 16. Unsafe metadata downgrade is not supported in this "
        "version.")}


def test_metadata_version_cannot_go_below_3_3_iv3():
    """Kafka 4.0 supports 3.3-IV3 (7) and up: an older level is outside the local range."""
    assert run(image_with(20), FeatureUpdate(MV, 6, UNSAFE_DOWNGRADE))[0] == {MV: invalid(
        "Invalid update version 6 for feature metadata.version. Local controller 1 only "
        "supports versions 7-25")}


def test_checks_in_kafkas_order():
    assert run(image_with(20), FeatureUpdate(MV, 20, 0))[0] == {MV: invalid(
        "Invalid update version 20 for feature metadata.version. The controller does not "
        "support the given upgrade type.")}
    assert run(image_with(20), FeatureUpdate(MV, 20, 4))[0][MV][0] == \
        ErrorCode.INVALID_UPDATE_VERSION
    assert run(image_with(20), FeatureUpdate(MV, -1, SAFE_DOWNGRADE))[0] == {MV: invalid(
        "Invalid update version -1 for feature metadata.version. A feature version cannot be "
        "less than 0.")}


def test_each_feature_has_its_own_result_and_successes_are_written():
    image = image_with(15)
    results, records = run(image, FeatureUpdate(MV, 20), FeatureUpdate("zzz", 2),
                           FeatureUpdate("aaa", 0))
    assert list(results) == ["aaa", MV, "zzz"]  # by name, as Kafka's TreeMap
    assert results["aaa"] == ok() and results[MV] == ok()
    assert results["zzz"][0] == ErrorCode.INVALID_UPDATE_VERSION
    assert records == [m.FeatureLevelRecord(name="aaa", feature_level=0),
                       m.FeatureLevelRecord(name=MV, feature_level=20)]


def test_a_feature_named_twice_takes_its_last_update():
    results, records = run(image_with(15), FeatureUpdate(MV, 26), FeatureUpdate(MV, 18))
    assert results == {MV: ok()}
    assert records == [m.FeatureLevelRecord(name=MV, feature_level=18)]


@pytest.mark.parametrize(("version", "allow_downgrade", "upgrade_type", "expected"), [
    (0, False, 3, UPGRADE), (0, True, 1, SAFE_DOWNGRADE),
    (1, True, 1, UPGRADE), (1, False, 3, UNSAFE_DOWNGRADE), (1, False, 2, SAFE_DOWNGRADE),
])
def test_upgrade_type_of_each_request_version(version, allow_downgrade, upgrade_type, expected):
    assert upgrade_type_of(version, allow_downgrade, upgrade_type) == expected


def test_metadata_changed_between():
    assert not metadata_changed_between(20, 20)
    assert not metadata_changed_between(17, 20) and not metadata_changed_between(20, 17)
    assert metadata_changed_between(16, 17) and metadata_changed_between(16, 20)
    assert not metadata_changed_between(9, 10) and metadata_changed_between(10, 11)


def test_dependencies_are_checked_against_the_proposed_levels():
    """Kafka 4.0's Feature.validateVersion: kraft.version 1 needs metadata.version 3.9-IV0
    (21), whether it is finalized already or upgraded in the same request."""
    results, records = run(image_with(20), FeatureUpdate("kraft.version", 1))
    assert results == {"kraft.version": invalid(
        "Invalid update version 1 for feature kraft.version. kraft.version could not be set to "
        "1 because it depends on metadata.version level 21")}
    assert records == []
    results, records = run(image_with(20), FeatureUpdate("kraft.version", 1),
                           FeatureUpdate(MV, 21))
    assert results == {"kraft.version": ok(), MV: ok()}
    assert {(r.name, r.feature_level) for r in records} == {("kraft.version", 1), (MV, 21)}
    # group.version 1 has no dependency besides the minimum metadata.version.
    assert run(image_with(7), FeatureUpdate("group.version", 1))[0] == {"group.version": ok()}


def test_default_levels_follow_kafka_4_0s_bootstrap_versions():
    from odradek.controller.features import bootstrap_feature_levels, default_level
    assert [default_level("group.version", mv) for mv in (7, 21, 22, 25)] == [0, 0, 1, 1]
    assert [default_level("kraft.version", mv) for mv in (20, 21)] == [0, 1]
    assert [default_level("transaction.version", mv) for mv in (23, 24)] == [0, 1]
    assert bootstrap_feature_levels(25) == {"group.version": 1, "transaction.version": 1}
    assert bootstrap_feature_levels(20) == {}
