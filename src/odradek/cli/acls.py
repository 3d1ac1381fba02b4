"""`odradek acls`: Kafka's kafka-acls.sh (AclCommand).

    odradek acls --bootstrap-server HOST:PORT [--command-config FILE]
        (--add | --remove | --list)
        [--topic T]... [--group G]... [--cluster] [--transactional-id X]...
        [--delegation-token D]... [--user-principal P]...
        [--resource-pattern-type literal|prefixed|match|any]
        [--allow-principal P]... [--deny-principal P]... [--allow-host H]... [--deny-host H]...
        [--operation OP]... [--producer [--idempotent]] [--consumer] [--principal P]... [--force]

prints as Kafka does::

    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
     	(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
     	(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

`--producer` grants WRITE, DESCRIBE and CREATE on the topics (and WRITE, DESCRIBE on the
transactional ids; IDEMPOTENT_WRITE on the cluster with `--idempotent`); `--consumer` READ and
DESCRIBE on the topics and READ on the groups. `--remove` asks for confirmation unless
`--force`.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import Option, OptionParser, ParsedOptions, admin_props, run
from odradek.client import AdminClient, KafkaConfigError, KafkaError
from odradek.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)

OPTIONS = [
    Option("bootstrap-server", "A list of host/port pairs to use for establishing the "
           "connection to the Kafka cluster.", "server to connect to"),
    Option("command-config", "A property file containing configs to be passed to Admin "
           "Client.", "command-config"),
    Option("add", "Indicates you are trying to add ACLs."),
    Option("remove", "Indicates you are trying to remove ACLs."),
    Option("list", "List ACLs for the specified resource, use --topic <topic> or --group "
           "<group> or --cluster to specify a resource."),
    Option("topic", "topic to which ACLs should be added or removed. A value of '*' indicates "
           "ACL should apply to all topics.", "topic"),
    Option("group", "Consumer Group to which the ACLs should be added or removed. A value of "
           "'*' indicates the ACLs should apply to all groups.", "group"),
    Option("cluster", "Add/Remove cluster ACLs."),
    Option("transactional-id", "The transactionalId to which ACLs should be added or removed. "
           "A value of '*' indicates the ACLs should apply to all transactionalIds.",
           "transactional-id"),
    Option("delegation-token", "Delegation token to which ACLs should be added or removed. A "
           "value of '*' indicates ACL should apply to all tokens.", "delegation-token"),
    Option("user-principal", "Specifies a user principal as a resource in relation with the "
           "operation.", "user-principal"),
    Option("resource-pattern-type", "The type of the resource pattern or pattern filter. When "
           "adding acls, this should be a specific pattern type, e.g. 'literal' or 'prefixed'. "
           "When listing or removing acls, a specific pattern type can be used to list or "
           "remove acls from specific resource patterns, or use the filter values of 'any' or "
           "'match', where 'any' will match any pattern type, but will match the resource name "
           "exactly, where as 'match' will perform pattern matching to list or remove all acls "
           "that affect the supplied resource(s).", "ANY|MATCH|LITERAL|PREFIXED",
           default="LITERAL"),
    Option("allow-principal", "principal is in principalType:name format. Note that "
           "principalType must be supported by the Authorizer being used.", "allow-principal"),
    Option("deny-principal", "principal is in principalType:name format. By default anyone "
           "not added through --allow-principal is denied access.", "deny-principal"),
    Option("principal", "List ACLs for the specified principal. principal is in "
           "principalType:name format. Multiple --principal option can be passed.",
           "principal"),
    Option("allow-host", "Host from which principals listed in --allow-principal will have "
           "access. If you have specified --allow-principal then the default for this option "
           "will be set to '*' which allows access from all hosts.", "allow-host"),
    Option("deny-host", "Host from which principals listed in --deny-principal will be denied "
           "access. If you have specified --deny-principal then the default for this option "
           "will be set to '*' which denies access from all hosts.", "deny-host"),
    Option("operation", "Operation that is being allowed or denied. Valid operation names "
           "are: Describe, DescribeConfigs, Alter, IdempotentWrite, Read, Delete, Create, "
           "ClusterAction, All, CreateTokens, DescribeTokens, Write, AlterConfigs",
           "operation", default="All"),
    Option("producer", "Convenience option to add/remove ACLs for producer role. This will "
           "generate ACLs that allows WRITE,DESCRIBE and CREATE on topic."),
    Option("consumer", "Convenience option to add/remove ACLs for consumer role. This will "
           "generate ACLs that allows READ,DESCRIBE on topic and READ on group."),
    Option("idempotent", "Enable idempotence for the producer. This should be used in "
           "combination with the --producer option."),
    Option("force", "Assume Yes to all queries and do not prompt."),
    Option("help", "Print usage information."),
    Option("version", "Display Kafka version."),
]
DESCRIPTION = "This tool helps to manage acls on kafka."
PARSER = OptionParser(OPTIONS, DESCRIPTION)

_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}


def pattern_text(resource_type: ResourceType, name: str | None, pattern: PatternType) -> str:
    """Kafka's ResourcePattern / ResourcePatternFilter toString."""
    shown = "<any>" if name is None else name
    return f"ResourcePattern(resourceType={resource_type.name}, name={shown}, " \
           f"patternType={pattern.name})"


def _operation(text: str) -> AclOperation:
    operation = _OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if operation is None:
        PARSER.fail(f"Invalid operation: {text}")
    return operation


def _pattern_type(options: ParsedOptions, adding: bool) -> PatternType:
    text = str(options.value("resource-pattern-type")).upper()
    if text not in PatternType.__members__ or text == "UNKNOWN":
        PARSER.fail(f"Unknown resource pattern type: {text}")
    pattern = PatternType[text]
    if adding and pattern in (PatternType.ANY, PatternType.MATCH):
        PARSER.fail(f"A 'resource-pattern-type' value of '{text.lower()}' is not valid when "
                    "adding acls.")
    return pattern


def _resources(options: ParsedOptions, pattern: PatternType) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, t) for t in options.all("topic")]
    resources += [(ResourceType.GROUP, g) for g in options.all("group")]
    resources += [(ResourceType.TRANSACTIONAL_ID, x) for x in options.all("transactional-id")]
    resources += [(ResourceType.DELEGATION_TOKEN, d) for d in options.all("delegation-token")]
    resources += [(ResourceType.USER, u) for u in options.all("user-principal")]
    if options.has("cluster") or (options.has("producer") and options.has("idempotent")):
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def _entries(options: ParsedOptions, operations: list[AclOperation]) -> list[tuple]:
    """(principal, host, operation, permission) of every ACE the options ask for."""
    entries = []
    for permission, principal_option, host_option in (
            (PermissionType.ALLOW, "allow-principal", "allow-host"),
            (PermissionType.DENY, "deny-principal", "deny-host")):
        principals = options.all(principal_option)
        hosts = options.all(host_option) or ([WILDCARD_HOST] if principals else [])
        for principal in principals:
            if ":" not in principal:
                PARSER.fail(f"Could not parse principal from `{principal}` (no colon is "
                            "present separating the principal type from name)")
            for host in hosts:
                for operation in operations:
                    entries.append((principal, host, operation, permission))
    return entries


def bindings_to_add(options: ParsedOptions, pattern: PatternType,
                    ) -> dict[tuple[ResourceType, str], list[AclBinding]]:
    """The ACLs `--add` / `--remove` name, per resource (Kafka's getResourceToAcls with the
    producer/consumer conveniences)."""
    per_resource: dict[tuple[ResourceType, str], list[AclBinding]] = {}

    def add(resource: tuple[ResourceType, str], operations: list[AclOperation]) -> None:
        unsupported = [op for op in operations if op != AclOperation.ALL and
                       op not in SUPPORTED_OPERATIONS[resource[0]]]
        if unsupported:
            PARSER.fail(f"ResourceType {resource[0].name} only supports operations "
                        + ",".join(op.name for op in
                                   (*SUPPORTED_OPERATIONS[resource[0]], AclOperation.ALL)))
        per_resource.setdefault(resource, []).extend(
            AclBinding(resource[0], resource[1], pattern, principal, host, op, permission)
            for principal, host, op, permission in _entries(options, operations))

    resources = _resources(options, pattern)
    if options.has("producer") or options.has("consumer"):
        if options.has("consumer") and not options.all("group"):
            PARSER.fail("With --consumer you must specify a --group")
        for resource in resources:
            kind = resource[0]
            operations: list[AclOperation] = []
            if kind == ResourceType.TOPIC:
                if options.has("producer"):
                    operations += [AclOperation.WRITE, AclOperation.DESCRIBE,
                                   AclOperation.CREATE]
                if options.has("consumer"):
                    operations += [AclOperation.READ, AclOperation.DESCRIBE]
            elif kind == ResourceType.TRANSACTIONAL_ID and options.has("producer"):
                operations = [AclOperation.WRITE, AclOperation.DESCRIBE]
            elif kind == ResourceType.CLUSTER and options.has("producer"):
                operations = [AclOperation.IDEMPOTENT_WRITE]
            elif kind == ResourceType.GROUP and options.has("consumer"):
                operations = [AclOperation.READ]
            if operations:
                add(resource, list(dict.fromkeys(operations)))
    else:
        operations = list(dict.fromkeys(_operation(op) for op in
                                        (options.all("operation") or ["All"])))
        for resource in resources:
            add(resource, operations)
    return per_resource


def _print_acls(bindings: list[AclBinding], out: Any, heading: str = "Current ACLs") -> None:
    by_pattern: dict[tuple, list[AclBinding]] = {}
    for acl in bindings:
        by_pattern.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type),
                              []).append(acl)
    for (kind, name, pattern), acls in by_pattern.items():
        print(f"{heading} for resource `{pattern_text(kind, name, pattern)}`: \n "
              + "\n".join("\t" + a.describe() for a in acls) + " \n", file=out)


def _filters(options: ParsedOptions, pattern: PatternType) -> list[AclBindingFilter]:
    resources = _resources(options, pattern)
    if not resources:
        return [AclBindingFilter(ResourceType.ANY, None, PatternType.ANY if pattern ==
                                 PatternType.LITERAL else pattern, None, None,
                                 AclOperation.ANY, PermissionType.ANY)]
    return [AclBindingFilter(kind, name, pattern, None, None, AclOperation.ANY,
                             PermissionType.ANY) for kind, name in resources]


async def _list(admin: AdminClient, options: ParsedOptions, pattern: PatternType,
                out: Any) -> None:
    found: list[AclBinding] = []
    for acl_filter in _filters(options, pattern):
        found += [a for a in await admin.describe_acls(acl_filter) if a not in found]
    principals = options.all("principal")
    if not principals:
        _print_acls(found, out)
        return
    for principal in principals:
        print(f"ACLs for principal `{principal}`", file=out)
        _print_acls([a for a in found if a.principal == principal], out)


def _confirm(question: str, options: ParsedOptions) -> bool:
    if options.has("force"):
        return True
    print(question)
    return sys.stdin.readline().strip().lower() == "y"


async def execute_async(options: ParsedOptions, out: Any) -> None:
    adding, removing = options.has("add"), options.has("remove")
    pattern = _pattern_type(options, adding)
    props = admin_props(options, options.value("bootstrap-server"))
    props.setdefault("client.id", "acls-tool")
    async with AdminClient(props) as admin:
        if adding:
            per_resource = bindings_to_add(options, pattern)
            if not per_resource:
                PARSER.fail("You must specify one of: --allow-principal, --deny-principal "
                            "when trying to add ACLs.")
            for (kind, name), acls in per_resource.items():
                print(f"Adding ACLs for resource `{pattern_text(kind, name, pattern)}`: \n "
                      + "\n".join("\t" + a.describe() for a in acls) + " \n", file=out)
                await admin.create_acls(acls)
            await _list(admin, options, pattern, out)
        elif removing:
            per_resource = bindings_to_add(options, pattern) \
                if options.all("allow-principal") or options.all("deny-principal") else {}
            if per_resource:
                for (kind, name), acls in per_resource.items():
                    question = ("Are you sure you want to remove ACLs: \n "
                                + "\n".join("\t" + a.describe() for a in acls)
                                + f" \n from resource filter "
                                  f"`{pattern_text(kind, name, pattern)}`? (y/n)")
                    if _confirm(question, options):
                        await admin.delete_acls([AclBindingFilter(
                            a.resource_type, a.resource_name, a.pattern_type, a.principal,
                            a.host, a.operation, a.permission) for a in acls])
            else:
                for acl_filter in _filters(options, pattern):
                    question = ("Are you sure you want to delete all ACLs for resource filter "
                                f"`{pattern_text(acl_filter.resource_type, acl_filter.resource_name, acl_filter.pattern_type)}`? (y/n)")
                    if _confirm(question, options):
                        await admin.delete_acls([acl_filter])
            await _list(admin, options, pattern, out)
        else:
            await _list(admin, options, pattern, out)


def execute(options: ParsedOptions) -> int:
    PARSER.require(options, "bootstrap-server")
    actions = sum(options.has(a) for a in ("add", "remove", "list"))
    if actions != 1:
        PARSER.fail("Command must include exactly one action: --list, --add, --remove. ")
    if options.has("remove") and not _resources(options, PatternType.ANY):
        PARSER.fail("You must specify one of: --topic, --cluster, --group, --transactional-id, "
                    "--delegation-token, --user-principal when trying to remove ACLs.")
    try:
        asyncio.run(execute_async(options, sys.stdout))
    except (KafkaError, KafkaConfigError, OSError) as exc:
        print(f"Error while executing ACL command: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    return run(PARSER, execute, sys.argv[1:] if argv is None else argv)


__all__ = ["bindings_to_add", "main", "pattern_text"]

if __name__ == "__main__":
    sys.exit(main())
