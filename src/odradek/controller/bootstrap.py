"""Bootstrap records (`<metadata.log.dir>/bootstrap.checkpoint`, as Kafka's): metadata records
`storage format` was given (SCRAM credentials from `--add-scram`), written into the metadata
log by the first active controller together with metadata.version, so a cluster can start with
the users its brokers and clients need (SCRAM between brokers included)."""

from __future__ import annotations

import base64
import os
import re
import secrets
import time
from typing import Any

from odradek.config.types import ConfigError
from odradek.protocol import messages as m
from odradek.protocol.messages import decode_metadata_record, encode_metadata_record
from odradek.raft.snapshot import encode_snapshot, read_snapshot
from odradek.security import scram

BOOTSTRAP_FILE = "bootstrap.checkpoint"


def write_bootstrap_records(metadata_log_dir: str, records: list[Any]) -> str:
    path = os.path.join(metadata_log_dir, BOOTSTRAP_FILE)
    data = encode_snapshot(0, int(time.time() * 1000),
                           [encode_metadata_record(record, 0) for record in records])
    os.makedirs(metadata_log_dir, exist_ok=True)
    temporary = path + ".tmp"
    with open(temporary, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    return path


def read_bootstrap_records(metadata_log_dir: str) -> list[Any]:
    """The records of the bootstrap file; [] when there is none."""
    try:
        with open(os.path.join(metadata_log_dir, BOOTSTRAP_FILE), "rb") as source:
            data = source.read()
    except FileNotFoundError:
        return []
    return [decode_metadata_record(value)[0] for value in read_snapshot(data).values]


_SCRAM_ARGUMENT = re.compile(r"(SCRAM-SHA-256|SCRAM-SHA-512)=\[(.*)\]")


def parse_add_scram(text: str) -> m.UserScramCredentialRecord:
    """Kafka's `--add-scram` syntax: `SCRAM-SHA-256=[name=alice,password=alice-secret]`, with
    optional `iterations=N` (4096) and `salt=<base64>`, or `saltedpassword=<base64>` with a
    salt instead of the password; values may be quoted."""
    match = _SCRAM_ARGUMENT.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"Invalid --add-scram argument {text!r}: expected "
                          "SCRAM-SHA-256=[name=<user>,password=<password>] (or SCRAM-SHA-512)")
    mechanism = match.group(1)
    settings: dict[str, str] = {}
    for item in re.split(r",(?=\s*\w+=)", match.group(2)):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"Invalid --add-scram setting {item!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        settings[key.strip().lower()] = value
    name = settings.get("name")
    if not name:
        raise ConfigError(f"You must supply 'name' to add-scram ({mechanism})")
    iterations = int(settings.get("iterations", scram.MIN_ITERATIONS))
    if not scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS:
        raise ConfigError(f"The 'iterations' value must be >= {scram.MIN_ITERATIONS} and "
                          f"<= {scram.MAX_ITERATIONS} for add-scram")
    salt = (base64.b64decode(settings["salt"]) if "salt" in settings
            else secrets.token_bytes(32))
    if "saltedpassword" in settings:
        if "salt" not in settings:
            raise ConfigError("You must supply 'salt' with 'saltedpassword' to add-scram")
        salted = base64.b64decode(settings["saltedpassword"])
    elif "password" in settings:
        salted = scram.salted_password(mechanism, settings["password"], salt, iterations)
    else:
        raise ConfigError(f"You must supply one of 'password' or 'saltedpassword' to "
                          f"add-scram ({mechanism})")
    credential = scram.credential_from_salted_password(mechanism, salted, salt, iterations)
    return m.UserScramCredentialRecord(
        name=name, mechanism=scram.MECHANISM_IDS[mechanism], salt=credential.salt,
        stored_key=credential.stored_key, server_key=credential.server_key,
        iterations=credential.iterations)
