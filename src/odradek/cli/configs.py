"""`odradek configs`: Kafka's kafka-configs.sh (ConfigCommand) for topics and brokers.

    odradek configs --bootstrap-server HOST:PORT --entity-type topics --entity-name t --describe
    odradek configs --bootstrap-server HOST:PORT --entity-type topics --entity-name t --alter \\
        --add-config retention.ms=1000,cleanup.policy=[delete,compact] --delete-config k1,k2

Output is Kafka's: ``Dynamic configs for topic t are:`` (``All configs`` with ``--all``,
``Default configs for brokers in the cluster are:`` for ``--entity-default``), then one line per
config, sorted by name: ``  name=value sensitive=false synonyms={SOURCE:name=value, ...}``;
``Completed updating config for topic t.`` after ``--alter``. Shortcuts ``--topic``,
``--broker``, ``--broker-defaults`` work too.

Users, clients (alone or together) and ips: client quotas through AlterClientQuotas /
DescribeClientQuotas, as Kafka's tool with --bootstrap-server does, printed as
``Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1024.0``;
users' SCRAM credentials through AlterUserScramCredentials (``SCRAM-SHA-256=[password=...]``).
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Sequence
from typing import Any

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import (
    Option,
    OptionParser,
    ParsedOptions,
    UsageError,
    admin_props,
    java_error,
    load_properties_file,
    run,
)
from odradek.client import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    KafkaConfigError,
    KafkaError,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from odradek.client.admin_quotas import (
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilter,
    ClientQuotaFilterComponent,
)

TOPICS, BROKERS, BROKER_LOGGERS, GROUPS = "topics", "brokers", "broker-loggers", "groups"
CLIENT_METRICS = "client-metrics"
ENTITY_TYPES = ["broker-loggers", "topics", "clients", "users", "brokers", "ips",
                "client-metrics", "groups"]
USERS, CLIENTS, IPS = "users", "clients", "ips"
SUPPORTED = (TOPICS, BROKERS, USERS, CLIENTS, IPS, GROUPS, CLIENT_METRICS)
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's QuotaConfig: the quota keys of users and clients, and of ips.
CLIENT_QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
                     "controller_mutation_rate")
IP_QUOTA_KEYS = ("connection_creation_rate",)
# The tool's entity types as client quota entity types.
QUOTA_ENTITY_TYPES = {USERS: "user", CLIENTS: "client-id", IPS: "ip"}
DEFAULT_SCRAM_ITERATIONS = 4096

#: Java's ConfigEntry.ConfigSource names where ours differ.
_SOURCE_NAMES = {ConfigSource.CLIENT_METRICS_CONFIG: "DYNAMIC_CLIENT_METRICS_CONFIG",
                 ConfigSource.GROUP_CONFIG: "DYNAMIC_GROUP_CONFIG"}

OPTIONS = [
    Option("add-config", "Key Value pairs of configs to add. Square brackets can be used to "
           "group values which contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'.", "String"),
    Option("add-config-file", "Path to a properties file with configs to add. See add-config "
           "for a list of valid configurations.", "String"),
    Option("all", "List all configs for the given topic, broker, or broker-logger entity "
           "(includes static configuration when the entity type is brokers)"),
    Option("alter", "Alter the configuration for the entity."),
    Option("bootstrap-controller", "The Kafka controllers to connect to.",
           "controller to connect to"),
    Option("bootstrap-server", "The Kafka servers to connect to.", "server to connect to"),
    Option("broker", "The broker's ID.", "String"),
    Option("broker-defaults", "The config defaults for all brokers."),
    Option("broker-logger", "The broker's ID for its logger config.", "String"),
    Option("command-config", "Property file containing configs to be passed to Admin Client. "
           "This is used only with --bootstrap-server option for describing and altering "
           "broker configs.", "command config property file"),
    Option("delete-config", "config keys to remove 'k1,k2'", "String"),
    Option("describe", "List configs for the given entity."),
    Option("entity-default", "Default entity name for clients/users/brokers/ips (applies to "
           "corresponding entity type)"),
    Option("entity-name", "Name of entity (topic name/client id/user principal name/broker "
           "id/ip/client metrics/group id)", "String"),
    Option("entity-type", "Type of entity (topics/clients/users/brokers/broker-loggers/ips/"
           "client-metrics/groups)", "String"),
    Option("topic", "The topic's name.", "String"),
]
PARSER = OptionParser(OPTIONS, "This tool helps to manipulate and describe entity config for a "
                               "topic, client, user, broker, ip, client-metrics or group")


class ConfigCommandError(Exception):
    """Printed as its message on stderr, exit code 1 (IllegalArgumentException and
    InvalidConfigurationException in Kafka's tool)."""


def _entities(options: ParsedOptions, argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Entity types and names in command-line order ('' for a default entity)."""
    types = list(options.all("entity-type"))
    names = _names_in_order(options, argv)
    for flag, entity_type in (("topic", TOPICS), ("broker", BROKERS),
                              ("broker-logger", BROKER_LOGGERS)):
        if options.has(flag):
            types.append(entity_type)
            names.append(options.value(flag))
    if options.has("broker-defaults"):
        types.append(BROKERS)
        names.append("")
    return types, names


def _names_in_order(options: ParsedOptions, argv: Sequence[str]) -> list[str]:
    """--entity-name values and --entity-default ('') in the order given."""
    values = iter(options.all("entity-name"))
    names = []
    for arg in argv:
        if not arg.startswith("--"):
            continue
        try:
            option = PARSER.resolve(arg[2:].partition("=")[0])
        except UsageError:
            continue
        if option.name == "entity-name":
            names.append(next(values))
        elif option.name == "entity-default":
            names.append("")
    return names


def check_args(options: ParsedOptions, types: list[str], names: list[str]) -> None:
    if options.has("alter") == options.has("describe"):
        PARSER.fail("Command must include exactly one action: --describe, --alter")
    for used, invalid in (("alter", ["describe"]),
                          ("describe", ["alter", "add-config", "delete-config"])):
        if options.has(used):
            for other in invalid:
                if options.has(other):
                    PARSER.fail(f'Option "{PARSER.by_name[used]}" can\'t be used with option '
                                f'"{PARSER.by_name[other]}"')
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise ConfigCommandError("Duplicate entity type(s) specified: " + ",".join(duplicates))
    if not (options.has("bootstrap-server") or options.has("bootstrap-controller")):
        raise ConfigCommandError("Either --bootstrap-server or --bootstrap-controller must be "
                                 "specified.")
    for entity_type in types:
        if entity_type not in ENTITY_TYPES:
            raise ConfigCommandError(
                f"Invalid entity type {entity_type}, the entity type must be one of "
                + ", ".join(ENTITY_TYPES) + " with a --bootstrap-server or "
                "--bootstrap-controller argument")
    if not types:
        raise ConfigCommandError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise ConfigCommandError("Only 'users' and 'clients' entity types may be specified "
                                 "together")
    flags = any(options.has(f) for f in ("topic", "broker", "broker-logger", "broker-defaults"))
    if flags and any(options.has(f) for f in ("entity-name", "entity-type", "entity-default")):
        raise ConfigCommandError("--entity-{type,name,default} should not be used in "
                                 "conjunction with specific entity flags")
    if options.has("bootstrap-server") and options.has("bootstrap-controller"):
        raise ConfigCommandError("Only one of --bootstrap-server or --bootstrap-controller can "
                                 "be specified")
    has_name = any(names)
    has_default = "" in names
    if has_name and types[0] in (BROKERS, BROKER_LOGGERS):
        for name in names:
            if name and not re.fullmatch(r"-?\d+", name):
                raise ConfigCommandError(f"The entity name for {types[0]} must be a valid "
                                         f"integer broker id, but it is: {name}")
    if options.has("describe") and options.has("entity-default") and \
            types[0] not in ("users", "clients", BROKERS, "ips"):
        raise ConfigCommandError("--entity-default must not be specified with --describe of "
                                 + ",".join(types))
    if options.has("alter"):
        if types[0] in ("users", "clients", BROKERS, "ips"):
            if not has_name and not has_default:
                raise ConfigCommandError("An entity-name or default entity must be specified "
                                         "with --alter of users, clients, brokers or ips")
        elif not has_name:
            raise ConfigCommandError("An entity name must be specified with --alter of "
                                     + ",".join(types))
        if options.has("add-config") and options.has("add-config-file"):
            raise ConfigCommandError("Only one of --add-config or --add-config-file must be "
                                     "specified")
        if not any(options.has(o) for o in ("add-config", "add-config-file", "delete-config")):
            raise ConfigCommandError("At least one of --add-config, --add-config-file, or "
                                     "--delete-config must be specified with --alter")
    if types[0] not in SUPPORTED:
        raise ConfigCommandError(f"Entity type {types[0]} is not supported yet by this tool "
                                 "(only topics, brokers, users, clients, ips, groups and client-metrics)")


def parse_configs_to_add(options: ParsedOptions) -> dict[str, str]:
    """Kafka's parseConfigsToBeAdded: commas split pairs except inside [...]."""
    props: dict[str, str] = {}
    if options.has("add-config-file"):
        props.update(load_properties_file(options.value("add-config-file")))
    if options.has("add-config"):
        outside_brackets = r"(?=[^\]]*(?:\[|$))"
        pairs = [re.split(r"\s*=\s*" + outside_brackets, item)
                 for item in re.split("," + outside_brackets, options.value("add-config"))]
        if any(len(pair) != 2 for pair in pairs):
            raise ConfigCommandError('Invalid entity config: all configs to be added must be in '
                                     'the format "key=val" or  "key=[val1,val2]" to group '
                                     'values which contain commas.')
        for key, value in pairs:
            props[key.strip()] = re.sub(r"\[?\]?", "", value).strip()
    for key in props:
        if not re.fullmatch(r"[$a-zA-Z0-9._-]*", key):
            raise ConfigCommandError(f"Invalid character found for config key: {key}")
    return props


def parse_configs_to_delete(options: ParsedOptions) -> list[str]:
    return [name.strip() for value in options.all("delete-config") for name in value.split(",")]


def _resource(entity_type: str, name: str) -> ConfigResource:
    if entity_type == GROUPS:
        return ConfigResource.group(name)
    if entity_type == CLIENT_METRICS:
        return ConfigResource.client_metrics(name)
    return ConfigResource.topic(name) if entity_type == TOPICS else ConfigResource.broker(name)


def _dynamic_source(entity_type: str, name: str) -> ConfigSource:
    if entity_type == TOPICS:
        return ConfigSource.DYNAMIC_TOPIC_CONFIG
    if entity_type == GROUPS:
        return ConfigSource.GROUP_CONFIG
    if entity_type == CLIENT_METRICS:
        return ConfigSource.CLIENT_METRICS_CONFIG
    return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if name == "" else \
        ConfigSource.DYNAMIC_BROKER_CONFIG


async def resource_config(admin: AdminClient, entity_type: str, name: str,
                          describe_all: bool) -> list[ConfigEntry]:
    """The entity's configs sorted by name: only its dynamic ones unless `describe_all`."""
    resource = _resource(entity_type, name)
    configs = (await admin.describe_configs([resource], include_synonyms=True))[resource]
    source = _dynamic_source(entity_type, name)
    entries = [entry for entry in configs.values()  # type: ignore[union-attr]
               if describe_all or entry.source == source]
    return sorted(entries, key=lambda entry: entry.name)


def config_line(entry: ConfigEntry) -> str:
    synonyms = ", ".join(f"{_SOURCE_NAMES.get(s.source, s.source.name)}:{s.name}={_java(s.value)}"
                         for s in entry.synonyms)
    return (f"  {entry.name}={_java(entry.value)} sensitive={str(entry.is_sensitive).lower()} "
            f"synonyms={{{synonyms}}}")


def _java(value: str | None) -> str:
    return "null" if value is None else value


async def describe(admin: AdminClient, entity_type: str, name: str | None,
                   describe_all: bool, out: Any) -> None:
    singular = entity_type[:-1]
    if name is not None and not describe_all:
        if entity_type == TOPICS:
            if name not in await admin.list_topics(include_internal=True):
                print(f"The {singular} '{name}' doesn't exist and doesn't have dynamic config.",
                      file=out)
                return
        elif name != "" and entity_type not in (GROUPS, CLIENT_METRICS):
            # (a group or a subscription need not exist to be described)
            nodes = (await admin.describe_cluster()).nodes
            if not any(str(node.id) == name for node in nodes):
                print(f"The {singular} '{name}' doesn't exist and doesn't have dynamic config.",
                      file=out)
                return
    if name is not None:
        entities = [name]
    elif entity_type == TOPICS:
        entities = list(await admin.list_topics(include_internal=True))
    elif entity_type == GROUPS:
        entities = sorted(listing.group_id for listing in await admin.list_groups())
    elif entity_type == CLIENT_METRICS:
        entities = await admin.list_client_metrics_resources()
    else:
        entities = [str(node.id) for node in (await admin.describe_cluster()).nodes] + [""]
    for entity in entities:
        if entity == "":
            print(f"Default configs for {entity_type} in the cluster are:", file=out)
        else:
            kind = "All" if describe_all else "Dynamic"
            print(f"{kind} configs for {singular} {entity} are:", file=out)
        for entry in await resource_config(admin, entity_type, entity, describe_all):
            print(config_line(entry), file=out)


async def alter(admin: AdminClient, options: ParsedOptions, entity_type: str, name: str,
                out: Any) -> None:
    to_add = parse_configs_to_add(options)
    to_delete = parse_configs_to_delete(options)
    current = {entry.name for entry in await resource_config(admin, entity_type, name, False)}
    invalid = [config for config in to_delete if config not in current]
    if invalid:
        raise ConfigCommandError(f"Invalid config(s): {','.join(invalid)}")
    operations = [AlterConfigOp(config, None, AlterConfigOpType.DELETE) for config in to_delete]
    operations += [AlterConfigOp(config, value, AlterConfigOpType.SET)
                   for config, value in to_add.items()]
    resource = _resource(entity_type, name)
    await admin.incremental_alter_configs({resource: operations}, timeout_ms=30_000)
    if name:
        print(f"Completed updating config for {entity_type[:-1]} {name}.", file=out)
    else:
        print(f"Completed updating default config for {entity_type} in the cluster.", file=out)


def _scram_upsertion(user: str, mechanism: str, value: str) -> UserScramCredentialUpsertion:
    """`iterations=8192,password=secret` (the brackets already stripped), Kafka's syntax."""
    settings = {}
    for item in value.split(","):
        key, sep, setting = item.partition("=")
        if not sep:
            raise ConfigCommandError(f"Invalid SCRAM credential config for {mechanism}: "
                                     "expected [iterations=N,password=...]")
        settings[key.strip()] = setting.strip()
    if "password" not in settings:
        raise ConfigCommandError(f"A password must be specified for {mechanism} "
                                 "(SCRAM-SHA-256=[iterations=8192,password=...])")
    try:
        iterations = int(settings.get("iterations", DEFAULT_SCRAM_ITERATIONS))
    except ValueError:
        raise ConfigCommandError(f"Invalid iterations for {mechanism}: "
                                 f"{settings['iterations']}") from None
    return UserScramCredentialUpsertion(user, mechanism, settings["password"], iterations)


def _java_list(names: Sequence[str]) -> str:
    return "List(" + ", ".join(names) + ")"


def java_double(value: float) -> str:
    """Java's Double.toString: plain between 10^-3 and 10^7, else d.dddE±n."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    digits, _, exponent = f"{value:.16e}".partition("e")
    mantissa = repr(float(digits))  # the shortest digits that read back the same
    if "e" in mantissa or len(mantissa) > 18:
        mantissa = digits.rstrip("0")
    return f"{mantissa}E{int(exponent)}"


async def alter_client_quota_entity(admin: AdminClient, options: ParsedOptions,
                                    types: list[str], names: list[str], out: Any) -> bool:
    """Quota configs of users / clients / ips (Kafka's alterQuotaConfigs); False when the
    alteration is for users' SCRAM credentials instead."""
    to_add = parse_configs_to_add(options)
    to_delete = parse_configs_to_delete(options)
    head = types[0]
    if head == IPS:
        unknown = [key for key in to_add if key not in IP_QUOTA_KEYS]
        if unknown:
            raise ConfigCommandError(f"Only connection quota configs can be added for '{IPS}' "
                                     f"using --bootstrap-server. Unexpected config names: "
                                     f"{_java_list(unknown)}")
        unknown = [key for key in to_delete if key not in IP_QUOTA_KEYS]
        if unknown:
            raise ConfigCommandError(f"Only connection quota configs can be deleted for "
                                     f"'{IPS}' using --bootstrap-server. Unexpected config "
                                     f"names: {_java_list(unknown)}")
    else:
        scram = [key for key in [*to_add, *to_delete] if key in SCRAM_MECHANISMS]
        unknown_add = [key for key in to_add
                       if key not in CLIENT_QUOTA_KEYS and key not in SCRAM_MECHANISMS]
        unknown_delete = [key for key in to_delete
                          if key not in CLIENT_QUOTA_KEYS and key not in SCRAM_MECHANISMS]
        quota_keys = [key for key in [*to_add, *to_delete] if key in CLIENT_QUOTA_KEYS]
        if head == CLIENTS or len(types) == 2:
            add_bad = unknown_add + [k for k in to_add if k in SCRAM_MECHANISMS]
            if add_bad:
                raise ConfigCommandError(f"Only quota configs can be added for '{CLIENTS}' "
                                         "using --bootstrap-server. Unexpected config names: "
                                         f"{_java_list(add_bad)}")
            delete_bad = unknown_delete + [k for k in to_delete if k in SCRAM_MECHANISMS]
            if delete_bad:
                raise ConfigCommandError(f"Only quota configs can be deleted for '{CLIENTS}' "
                                         "using --bootstrap-server. Unexpected config names: "
                                         f"{_java_list(delete_bad)}")
        else:
            if unknown_add:
                raise ConfigCommandError(f"Only quota and SCRAM credential configs can be added "
                                         f"for '{USERS}' using --bootstrap-server. Unexpected "
                                         f"config names: {_java_list(unknown_add)}")
            if unknown_delete:
                raise ConfigCommandError(f"Only quota and SCRAM credential configs can be "
                                         f"deleted for '{USERS}' using --bootstrap-server. "
                                         f"Unexpected config names: "
                                         f"{_java_list(unknown_delete)}")
            if scram:
                if "" in names:
                    raise ConfigCommandError("The use of --entity-default or --user-defaults is "
                                             "not allowed with User SCRAM Credentials using "
                                             "--bootstrap-server.")
                if quota_keys:
                    raise ConfigCommandError("Cannot alter both quota and SCRAM credential "
                                             f"configs simultaneously for '{USERS}' using "
                                             "--bootstrap-server.")
                return False
    ops: dict[str, float | None] = {}
    for key, value in to_add.items():
        try:
            ops[key] = float(value)
        except ValueError:
            raise ConfigCommandError(f"Cannot parse quota configuration value for {key}: "
                                     f"{value}") from None
    ops.update({key: None for key in to_delete})
    entity = ClientQuotaEntity.of({QUOTA_ENTITY_TYPES[kind]: name or None
                                   for kind, name in zip(types, names)})
    await admin.alter_client_quotas([ClientQuotaAlteration(entity, ops)], timeout_ms=60_000)
    if names[0]:
        print(f"Completed updating config for {head[:-1]} {names[0]}.", file=out)
    else:
        print(f"Completed updating default config for {head} in the cluster.", file=out)
    return True


async def describe_client_quotas(admin: AdminClient, types: list[str], names: list[str],
                                 out: Any) -> None:
    """`Quota configs for <entity> are k=v, ...` per entity of exactly the given types
    (Kafka's getAllClientQuotasConfigs: a name, the default, or every name of a type)."""
    components = []
    for index, kind in enumerate(types):
        quota_type = QUOTA_ENTITY_TYPES[kind]
        name = names[index] if index < len(names) else None
        if name is None:
            components.append(ClientQuotaFilterComponent.of_entity_type(quota_type))
        elif name == "":
            components.append(ClientQuotaFilterComponent.of_default_entity(quota_type))
        else:
            components.append(ClientQuotaFilterComponent.of_entity(quota_type, name))
    described = await admin.describe_client_quotas(
        ClientQuotaFilter.contains_only(components), timeout_ms=30_000)
    labels = (("user", "user-principal"), ("client-id", "client-id"), ("ip", "ip"))
    for entity in sorted(described, key=lambda e: [(k, n or "") for k, n in e.entries]):
        names_by_type = entity.as_dict()
        parts = []
        for quota_type, label in labels:
            if quota_type in names_by_type:
                name = names_by_type[quota_type]
                parts.append(f"{label} '{name}'" if name is not None else f"the default {label}")
        values = ", ".join(f"{key}={java_double(value)}"
                           for key, value in described[entity].items())
        print(f"Quota configs for {', '.join(parts)} are {values}", file=out)


async def alter_user(admin: AdminClient, options: ParsedOptions, user: str, out: Any) -> None:
    """SCRAM credentials: `--add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'`,
    `--delete-config SCRAM-SHA-256`. Each goes in a request of its own: Kafka's controller
    takes one alteration per user per request."""
    to_add = parse_configs_to_add(options)
    to_delete = parse_configs_to_delete(options)
    alterations: list[Any] = [UserScramCredentialDeletion(user, mechanism)
                              for mechanism in to_delete]
    alterations += [_scram_upsertion(user, mechanism, value)
                    for mechanism, value in to_add.items()]
    for alteration in alterations:
        await admin.alter_user_scram_credentials([alteration], timeout_ms=30_000)
    print(f"Completed updating config for user {user}.", file=out)


async def describe_users(admin: AdminClient, name: str | None, out: Any) -> None:
    users = None if name is None else [name]
    described = await admin.describe_user_scram_credentials(users, timeout_ms=30_000,
                                                            raise_errors=False)
    for user, credentials in described.items():
        if isinstance(credentials, KafkaError):
            continue  # no credentials: nothing to show, as Kafka
        listed = ", ".join(f"{info.mechanism}=iterations={info.iterations}"
                           for info in credentials)
        print(f"SCRAM credential configs for user-principal '{user}' are {listed}", file=out)


async def execute_async(options: ParsedOptions, types: list[str], names: list[str],
                        out: Any) -> None:
    bootstrap = options.value("bootstrap-server") or options.value("bootstrap-controller")
    if options.has("alter") and len(types) != len(names):
        raise ConfigCommandError("An entity name must be specified for every entity type")
    props = admin_props(options, bootstrap)
    if options.has("bootstrap-controller"):  # Kafka's bootstrap.controllers (KIP-919)
        props["bootstrap.controllers"] = props.pop("bootstrap.servers")
    async with AdminClient(props) as admin:
        if types[0] in QUOTA_ENTITY_TYPES:
            if options.has("alter"):
                if not await alter_client_quota_entity(admin, options, types, names, out):
                    await alter_user(admin, options, names[0], out)
            else:
                await describe_client_quotas(admin, types, names, out)
                # SCRAM credentials only for users alone, not for the default user
                if types == [USERS] and "" not in names:
                    await describe_users(admin, names[0] if names else None, out)
        elif options.has("alter"):
            await alter(admin, options, types[0], names[0], out)
        else:
            await describe(admin, types[0], names[0] if names else None, options.has("all"),
                           out)


def make_execute(argv: Sequence[str]) -> Any:
    def execute(options: ParsedOptions) -> int:
        types, names = _entities(options, argv)
        try:
            check_args(options, types, names)
            asyncio.run(execute_async(options, types, names, sys.stdout))
        except (ConfigCommandError, KafkaConfigError, FileNotFoundError) as exc:
            print(exc, file=sys.stderr)
            return 1
        except KafkaError as exc:
            if exc.code.name == "INVALID_CONFIG" or exc.code.name == "INVALID_REQUEST":
                print(exc.message, file=sys.stderr)
                return 1
            print(f"Error while executing config command with args '{' '.join(argv)}'",
                  file=sys.stderr)
            print(f"java.util.concurrent.ExecutionException: {java_error(exc)}",
                  file=sys.stderr)
            return 1
        return 0

    return execute


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    args = sys.argv[1:] if argv is None else argv
    return run(PARSER, make_execute(args), args)


if __name__ == "__main__":
    sys.exit(main())
