"""UpdateFeatures (API 57) against a real single-node broker+controller over a socket: the
controller checks each feature as Kafka 4.0 does, writes the successes, and ApiVersions reports
the finalized levels at the metadata offset they were read at. On the active controller a
change is in the image once the request returns (it returns once committed)."""

from __future__ import annotations

import pytest
from raw_client import RawClient

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

UPDATE_FEATURES = 57
API_VERSIONS = 18
MV = "metadata.version"
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
Key = m.UpdateFeaturesRequest.FeatureUpdateKey


@pytest.fixture(scope="module")
def client(odradek_broker):
    with RawClient(odradek_broker.host, odradek_broker.port) as raw:
        yield raw


def update(client: RawClient, *items: tuple[str, int, int], version: int = 1,
           validate_only: bool = False, allow_downgrade: bool = False) -> m.UpdateFeaturesResponse:
    request = m.UpdateFeaturesRequest(
        timeout_ms=10_000, validate_only=validate_only,
        feature_updates=[Key(feature=name, max_version_level=level, upgrade_type=upgrade_type,
                             allow_downgrade=allow_downgrade)
                         for name, level, upgrade_type in items])
    return client.call(UPDATE_FEATURES, version, request)


def results(response: m.UpdateFeaturesResponse) -> dict[str, tuple[ErrorCode, str | None]]:
    assert response.error_code == ErrorCode.NONE and response.error_message is None
    return {r.feature: (ErrorCode(r.error_code), r.error_message) for r in response.results}


def finalized(client: RawClient) -> tuple[dict[str, int], int]:
    """(finalized metadata.version, the features' epoch) as ApiVersions reports them."""
    response = client.call(API_VERSIONS, 3, m.ApiVersionsRequest(
        client_software_name="t", client_software_version="1"))
    return ({f.name: f.max_version_level for f in response.finalized_features if f.name == MV},
            response.finalized_features_epoch)


def invalid(message: str) -> tuple[ErrorCode, str]:
    return ErrorCode.INVALID_UPDATE_VERSION, message


def local_range_error(level: int) -> tuple[ErrorCode, str]:
    return invalid(f"Invalid update version {level} for feature metadata.version. Local "
                   f"controller 1 only supports versions 7-25")


def test_update_features_is_advertised_at_versions_0_to_2(client):
    response = client.call(API_VERSIONS, 3, m.ApiVersionsRequest(
        client_software_name="t", client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert versions[UPDATE_FEATURES] == (0, 2)
    assert {f.name: (f.min_version, f.max_version) for f in response.supported_features} == \
        {MV: (7, 25)}  # v3: features whose lowest level is 0 left out


@pytest.mark.parametrize("version", [0, 1])
def test_upgrade_to_the_current_level_succeeds(client, version):
    before, epoch_before = finalized(client)
    assert before == {MV: 25}
    assert results(update(client, (MV, 25, UPGRADE), version=version)) == \
        {MV: (ErrorCode.NONE, None)}
    after, epoch_after = finalized(client)
    # Kafka writes the level again: nothing changes but the metadata offset.
    assert after == before and epoch_after > epoch_before


def test_unknown_feature_fails(client):
    assert results(update(client, ("no.such.feature", 1, UPGRADE))) == {"no.such.feature": invalid(
        "Invalid update version 1 for feature no.such.feature. Local controller 1 does not "
        "support this feature.")}


def test_level_above_the_supported_max_fails(client):
    assert results(update(client, (MV, 26, UPGRADE))) == {MV: local_range_error(26)}
    assert results(update(client, (MV, 0, SAFE_DOWNGRADE))) == {MV: local_range_error(0)}


def test_validate_only_changes_nothing(client):
    before = finalized(client)
    assert results(update(client, (MV, 24, SAFE_DOWNGRADE), validate_only=True)) == \
        {MV: (ErrorCode.NONE, None)}
    assert finalized(client) == before


def test_downgrades(client):
    assert results(update(client, (MV, 24, UPGRADE))) == {MV: invalid(
        "Invalid update version 24 for feature metadata.version. Can't downgrade the version "
        "of this feature without setting the upgrade type to either safe or unsafe "
        "downgrade.")}
    # 4.0-IV1 (23) changed the metadata: going below it would lose information
    assert results(update(client, (MV, 22, SAFE_DOWNGRADE))) == {MV: invalid(
        "Invalid metadata.version 22. Refusing to perform the requested downgrade because it "
        "might delete metadata information.")}
    assert results(update(client, (MV, 22, UNSAFE_DOWNGRADE))) == {MV: invalid(
        "Invalid metadata.version 22. Unsafe metadata downgrade is not supported in this "
        "version.")}
    # 4.0-IV2 .. 4.0-IV3 changed nothing: a safe downgrade to 4.0-IV1 goes through, and back
    assert results(update(client, (MV, 23, SAFE_DOWNGRADE))) == {MV: (ErrorCode.NONE, None)}
    assert finalized(client)[0] == {MV: 23}
    assert results(update(client, (MV, 25, UPGRADE))) == {MV: (ErrorCode.NONE, None)}
    assert finalized(client)[0] == {MV: 25}


def test_v0_allow_downgrade_is_a_safe_downgrade(client):
    response = update(client, (MV, 24, UPGRADE), version=0, allow_downgrade=False)
    assert results(response)[MV][0] == ErrorCode.INVALID_UPDATE_VERSION
    # v0 has no ValidateOnly: this one is carried out
    assert results(update(client, (MV, 24, UPGRADE), version=0, allow_downgrade=True)) == \
        {MV: (ErrorCode.NONE, None)}
    assert finalized(client)[0] == {MV: 24}
    assert results(update(client, (MV, 25, UPGRADE), version=0)) == {MV: (ErrorCode.NONE, None)}
    assert finalized(client)[0] == {MV: 25}


def test_each_feature_gets_its_own_result(client):
    response = update(client, ("zz.feature", 3, UPGRADE), (MV, 25, UPGRADE),
                      ("aa.feature", 0, SAFE_DOWNGRADE))
    assert [r.feature for r in response.results] == ["aa.feature", MV, "zz.feature"]
    assert results(response) == {
        "aa.feature": (ErrorCode.NONE, None),  # level 0 of a feature nobody has: a no-op
        MV: (ErrorCode.NONE, None),
        "zz.feature": invalid("Invalid update version 3 for feature zz.feature. Local "
                              "controller 1 does not support this feature."),
    }
    assert finalized(client)[0] == {MV: 25}
