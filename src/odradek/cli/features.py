"""`odradek features`: Kafka's kafka-features.sh (FeatureCommand, Kafka 4.0).

    odradek features --bootstrap-server HOST:PORT describe

prints one line per feature the node supports, sorted by name, from its ApiVersions answer
(supported features, finalized features and their epoch; a feature not finalized shows 0)::

    Feature: group.version	SupportedMinVersion: 0	SupportedMaxVersion: 1	FinalizedVersionLevel: 1	Epoch: 6
    Feature: kraft.version	SupportedMinVersion: 0	SupportedMaxVersion: 1	FinalizedVersionLevel: 0	Epoch: 6
    Feature: metadata.version	SupportedMinVersion: 3.3-IV3	SupportedMaxVersion: 4.0-IV3	FinalizedVersionLevel: 4.0-IV3	Epoch: 6
    Feature: transaction.version	SupportedMinVersion: 0	SupportedMaxVersion: 1	FinalizedVersionLevel: 0	Epoch: 6

metadata.version levels are printed by their release names (Kafka's MetadataVersion), other
features by number. ``upgrade``, ``downgrade`` and ``disable`` send UpdateFeatures (any broker
forwards it to the active controller) and print one line per feature:
``metadata.version was upgraded to 20.``, or the controller's refusal:
``Could not downgrade metadata.version to 16. Invalid metadata.version 16. Refusing to perform
the requested downgrade because it might delete metadata information.``, then
``1 out of 1 operation(s) failed.`` on stderr and exit code 1. A node that does not serve
UpdateFeatures (a controller listener) fails each update as Kafka's client does:
``... The node does not support UPDATE_FEATURES``.
"""

from __future__ import annotations

import argparse
import sys

from odradek.cli.common import ToolArgumentParser, ToolError
from odradek.cli.kraft_client import (
    UPDATE_FEATURES,
    KraftClient,
    UnsupportedApiError,
    run_kraft_tool,
    run_with_client,
)
from odradek.cli.storage import METADATA_VERSIONS, parse_release_version
from odradek.cli.tool_options import load_properties_file
from odradek.controller import features as controller_features
from odradek.protocol import messages as m
from odradek.protocol.errors import KafkaError

PROG = "kafka-features"
METADATA_VERSION_FEATURE = "metadata.version"
#: Kafka 4.0's MetadataVersion.MINIMUM_VERSION (3.3-IV3), the oldest level upgrade and
#: downgrade name in their error message.
MINIMUM_BOOTSTRAP_VERSION = "3.3-IV3"
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3  # UpdateFeatures' upgrade types


def level_to_string(feature: str, level: int) -> str:
    """Kafka's levelToString: metadata.version levels by release name."""
    if feature == METADATA_VERSION_FEATURE:
        if 1 <= level <= len(METADATA_VERSIONS):
            return METADATA_VERSIONS[level - 1]
        return f"UNKNOWN {level}"
    return str(level)


def describe_lines(response: m.ApiVersionsResponse) -> list[str]:
    finalized = {f.name: f.max_version_level for f in response.finalized_features or []}
    epoch = response.finalized_features_epoch
    epoch_text = str(epoch) if epoch is not None and epoch >= 0 else "-"
    lines = []
    for feature in sorted(response.supported_features or [], key=lambda f: f.name):
        lines.append(
            f"Feature: {feature.name}\t"
            f"SupportedMinVersion: {level_to_string(feature.name, feature.min_version)}\t"
            f"SupportedMaxVersion: {level_to_string(feature.name, feature.max_version)}\t"
            f"FinalizedVersionLevel: "
            f"{level_to_string(feature.name, finalized.get(feature.name, 0))}\t"
            f"Epoch: {epoch_text}")
    return lines


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog=PROG, description="This tool manages feature flags in Kafka.")
    bootstrap = parser.add_mutually_exclusive_group(required=True)
    bootstrap.add_argument(
        "--bootstrap-server",
        help="A comma-separated list of host:port pairs to use for establishing the connection "
             "to the Kafka cluster.")
    bootstrap.add_argument(
        "--bootstrap-controller",
        help="A comma-separated list of host:port pairs to use for establishing the connection "
             "to the KRaft quorum.")
    parser.add_argument("--command-config",
                        help="Property file containing configs to be passed to Admin Client.")
    commands = parser.add_subparsers(
        dest="command", required=True,
        metavar="{describe,upgrade,downgrade,disable,version-mapping,feature-dependencies}")
    commands.add_parser("describe", help="Describes the current active feature flags.")
    upgrade = commands.add_parser("upgrade", help="Upgrade one or more feature flags.")
    upgrade.add_argument("--metadata", help="The level to which we should upgrade the metadata. "
                                            "For example, 3.3-IV3.")
    upgrade.add_argument("--release-version",
                         help="The release version to update all features to. For example, "
                              "3.9-IV0 will set metadata.version=21 and kraft.version=1. Use "
                              "the version-mapping command to learn which features will be set "
                              "for any given version.")
    upgrade.add_argument("--feature", action="append",
                         help="A feature upgrade we should perform, in feature=level format. "
                              "For example: `metadata.version=5`.")
    upgrade.add_argument("--dry-run", action="store_true",
                         help="Validate this upgrade, but do not perform it.")
    downgrade = commands.add_parser("downgrade", help="Upgrade one or more feature flags.")
    downgrade.add_argument("--metadata", help="The level to which we should downgrade the "
                                              "metadata. For example, 3.3-IV0.")
    downgrade.add_argument("--release-version",
                           help="The release version to downgrade all features to. For "
                                "example, 3.9-IV0 will set metadata.version=21 and "
                                "kraft.version=1. Use the version-mapping command to learn "
                                "which features will be set for any given version.")
    downgrade.add_argument("--feature", action="append",
                           help="A feature downgrade we should perform, in feature=level "
                                "format. For example: `metadata.version=5`.")
    downgrade.add_argument("--unsafe", action="store_true",
                           help="Perform this downgrade even if it may irreversibly destroy "
                                "metadata.")
    downgrade.add_argument("--dry-run", action="store_true",
                           help="Validate this downgrade, but do not perform it.")
    disable = commands.add_parser("disable", help="Disable one or more feature flags. This is "
                                                  "the same as downgrading the version to zero.")
    disable.add_argument("--feature", action="append", help="A feature flag to disable.")
    disable.add_argument("--unsafe", action="store_true",
                         help="Disable this feature flag even if it may irreversibly destroy "
                              "metadata.")
    disable.add_argument("--dry-run", action="store_true",
                         help="Perform a dry-run of this disable operation.")
    mapping = commands.add_parser(
        "version-mapping", help="Look up the corresponding features for a given metadata "
                                "version. Using the command with no --release-version  argument "
                                "will return the mapping for the latest stable metadata version")
    mapping.add_argument("--release-version",
                         help=f"The release version to use for the corresponding feature "
                              f"mapping. The minimum is {MINIMUM_BOOTSTRAP_VERSION}; the "
                              f"default is {METADATA_VERSIONS[-1]}")
    dependencies = commands.add_parser(
        "feature-dependencies", help="Look up dependencies for a given feature version. If the "
                                     "feature is not known or the version not yet defined, an "
                                     "error is thrown. Multiple features can be specified.")
    dependencies.add_argument("--feature", action="append", required=True,
                              help="The feature and version to look up dependencies for, in "
                                   "feature=version format. For example: "
                                   "`metadata.version=5`.")
    return parser


# ------------------------------------------------------------------------------------------
# updates


def parse_name_and_level(text: str) -> tuple[str, int]:
    name, sep, level_text = text.partition("=")
    if not sep:
        raise ToolError(f"Can't parse feature=level string {text}: equals sign not found.")
    level_text = level_text.strip()
    try:
        level = int(level_text)
        if not -32768 <= level <= 32767:
            raise ValueError(level_text)
    except ValueError:
        raise ToolError(f"Can't parse feature=level string {text}: unable to parse "
                        f"{level_text} as a short.") from None
    return name.strip(), level


def _metadata_level(text: str) -> int:
    try:
        return METADATA_VERSIONS.index(parse_release_version(text)) + 1
    except ToolError:
        first = METADATA_VERSIONS.index(MINIMUM_BOOTSTRAP_VERSION)
        raise ToolError(f"Unsupported metadata version {text}. Supported metadata versions are "
                        f"{', '.join(METADATA_VERSIONS[first:])}") from None


def release_version_updates(text: str, upgrade_type: int) -> dict[str, int]:
    """`--release-version V`: metadata.version V and every feature at its level for V (an
    upgrade leaves out the features whose level for V is 0), as Kafka's FeatureCommand."""
    level = _metadata_level(text)
    updates = {METADATA_VERSION_FEATURE: level}
    for name in controller_features.FEATURE_VERSIONS:
        feature_level = controller_features.default_level(name, level)
        if upgrade_type != UPGRADE or feature_level > 0:
            updates[name] = feature_level
    return updates


def version_mapping_lines(release_version: str | None) -> list[str]:
    """`version-mapping`: metadata.version and each feature's level for a release version (by
    default the latest), in Kafka's Feature order."""
    name = release_version or METADATA_VERSIONS[-1]
    level = _metadata_level(name)
    return [f"metadata.version={level} ({name})"] + [
        f"{feature}={controller_features.default_level(feature, level)}"
        for feature in controller_features.FEATURE_VERSIONS]


def feature_dependencies_lines(feature_args: list[str]) -> list[str]:
    """`feature-dependencies`: what each feature=level needs (metadata.version needs nothing)."""
    lines = []
    for text in feature_args:
        name, level = parse_name_and_level(text)
        if name == METADATA_VERSION_FEATURE:
            if not 1 <= level <= len(METADATA_VERSIONS):
                raise ToolError(f"Unknown metadata.version {level}")
            lines.append(f"{name}={level} ({METADATA_VERSIONS[level - 1]}) has no dependencies.")
            continue
        if name not in controller_features.FEATURE_VERSIONS:
            raise ToolError(f"Unknown feature: {name}")
        try:
            version = controller_features.feature_version(name, level)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        if not version.dependencies:
            lines.append(f"{name}={level} has no dependencies.")
            continue
        lines.append(f"{name}={level} requires:")
        for needed, needed_level in version.dependencies.items():
            shown = (f" ({METADATA_VERSIONS[needed_level - 1]})"
                     if needed == METADATA_VERSION_FEATURE else "")
            lines.append(f"    {needed}={needed_level}{shown}")
    return lines


def requested_updates(args: argparse.Namespace) -> dict[str, int]:
    release_version = getattr(args, "release_version", None)
    if release_version is not None:
        if getattr(args, "metadata", None) is not None or args.feature:
            raise ToolError("Can not specify `release-version` with other feature flags.")
        upgrade_type = UPGRADE if args.command == "upgrade" else SAFE_DOWNGRADE
        return release_version_updates(release_version, upgrade_type)
    updates: dict[str, int] = {}
    if getattr(args, "metadata", None) is not None:
        updates[METADATA_VERSION_FEATURE] = _metadata_level(args.metadata)
    for feature in args.feature or []:
        if args.command == "disable":
            name, level = feature, 0
        else:
            name, level = parse_name_and_level(feature)
        if name in updates:
            raise ToolError(f"Feature {name} was specified more than once.")
        updates[name] = level
    return updates


async def _update_features(client: KraftClient, updates: dict[str, int], upgrade_type: int,
                           dry_run: bool) -> dict[str, str | None]:
    """Per feature, None when updated, else the error message."""
    connection = await client.connection()
    if UPDATE_FEATURES not in connection.api_versions:
        message = str(UnsupportedApiError(UPDATE_FEATURES))
        return {name: message for name in updates}
    # v0 says "downgrade" with AllowDowngrade and cannot validate only; v1 has UpgradeType
    # and ValidateOnly instead (a field outside its version must keep its default).
    version = connection.pick_version(UPDATE_FEATURES)
    Key = m.UpdateFeaturesRequest.FeatureUpdateKey
    request = m.UpdateFeaturesRequest(
        timeout_ms=60_000,
        feature_updates=[Key(feature=name, max_version_level=level, allow_downgrade=(
                                 version == 0 and upgrade_type != UPGRADE),
                             upgrade_type=upgrade_type if version >= 1 else UPGRADE)
                         for name, level in updates.items()],
        validate_only=dry_run and version >= 1)
    if dry_run and version == 0:  # what Kafka's serializer refuses it with
        return {name: "Attempted to write a non-default validateOnly at version 0"
                for name in updates}
    response = await connection.send(request, api_version=version)
    if response.error_code != 0:
        message = KafkaError(response.error_code, response.error_message).message
        return {name: message for name in updates}
    if version >= 2:  # v2 answers with the top-level error only (KIP-1022): no error, all done
        return {name: None for name in updates}
    results: dict[str, str | None] = {}
    for result in response.results:
        results[result.feature] = (None if result.error_code == 0 else
                                   KafkaError(result.error_code, result.error_message).message)
    return {name: results.get(name, "The controller response did not contain a result for "
                                    "this feature") for name in updates}


def update(op: str, props: dict[str, str], to_controllers: bool, updates: dict[str, int],
           upgrade_type: int, dry_run: bool) -> int:
    if not updates:
        raise ToolError(f"You must specify at least one feature to {op}")

    async def body(client: KraftClient) -> dict[str, str | None]:
        return await _update_features(client, updates, upgrade_type, dry_run)

    errors = run_with_client(props, to_controllers, body)
    failures = 0
    for name in sorted(errors):
        level = updates[name]
        error = errors[name]
        if error is not None:
            helper = "Can not " if dry_run else "Could not "
            suffix = f"disable {name}" if op == "disable" else f"{op} {name} to {level}"
            print(f"{helper}{suffix}. {error}")
            failures += 1
        else:
            verb = " can be " if dry_run else " was "
            obj = "disabled." if op == "disable" else f"{op}d to {level}."
            print(f"{name}{verb}{obj}")
    if failures:
        raise ToolError(f"{failures} out of {len(updates)} operation(s) failed.")
    return 0


# ------------------------------------------------------------------------------------------
# main


def execute(args: argparse.Namespace) -> int:
    props = load_properties_file(args.command_config) if args.command_config else {}
    to_controllers = args.bootstrap_controller is not None
    props["bootstrap.servers"] = args.bootstrap_controller or args.bootstrap_server
    if args.command == "version-mapping":
        for line in version_mapping_lines(args.release_version):
            print(line)
        return 0
    if args.command == "feature-dependencies":
        for line in feature_dependencies_lines(args.feature):
            print(line)
        return 0
    if args.command == "describe":
        async def describe(client: KraftClient) -> m.ApiVersionsResponse:
            return await client.api_versions()

        for line in describe_lines(run_with_client(props, to_controllers, describe)):
            print(line)
        return 0
    if args.command == "upgrade":
        upgrade_type = UPGRADE
    else:
        upgrade_type = UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE
    return update(args.command, props, to_controllers, requested_updates(args), upgrade_type,
                  args.dry_run)


def main(argv: list[str] | None = None) -> int:
    return run_kraft_tool(build_parser, execute, argv, reported=(FileNotFoundError,))


if __name__ == "__main__":
    sys.exit(main())
