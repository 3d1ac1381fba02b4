"""A client's TLS and SASL settings, from Kafka's (Java) and librdkafka's config names.

`security.protocol` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL. TLS: `ssl.truststore.*` /
`ssl.keystore.*` (PEM) or librdkafka's `ssl.ca.location`, `ssl.certificate.location`,
`ssl.key.location`; `ssl.endpoint.identification.algorithm` "https" (the default) checks the
broker's host name, empty disables the check. SASL: `sasl.mechanism` PLAIN, SCRAM-SHA-256 or
SCRAM-SHA-512 with `sasl.username`/`sasl.password` (librdkafka) or `sasl.jaas.config`
(PlainLoginModule / ScramLoginModule with username and password options). OAUTHBEARER with
unsecured tokens only (development and tests, as Kafka's default): the principal from
librdkafka's `sasl.oauthbearer.config` (`principal=<name>`) or the Java login module's
`unsecuredLoginStringClaim_sub` option.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from odradek.config.types import ConfigError, Password
from odradek.security import jaas
from odradek.security.tls import client_context

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"SaslCredentials({self.mechanism}, {self.username!r})"


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None


def _value(config: Mapping[str, Any], name: str) -> Any:
    value = config.get(name)
    return value.value if isinstance(value, Password) else value


def client_security(config: Mapping[str, Any]) -> ClientSecurity:
    """The TLS context and SASL credentials a client's config asks for."""
    protocol = str(_value(config, "security.protocol") or "PLAINTEXT").upper()
    ssl_context = None
    if protocol in ("SSL", "SASL_SSL"):
        ssl_context = client_context(lambda name: _value(config, name))
    sasl = None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = str(_value(config, "sasl.mechanism") or "GSSAPI").upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"Invalid value {mechanism} for configuration sasl.mechanism: "
                              f"Odradek's client supports {', '.join(SASL_MECHANISMS)}")
        username = _value(config, "sasl.username")
        password = _value(config, "sasl.password")
        jaas_config = _value(config, "sasl.jaas.config")
        options = jaas.jaas_options(str(jaas_config)) if jaas_config else {}
        username = options.get("username", username)
        password = options.get("password", password)
        if mechanism == "OAUTHBEARER":
            settings = dict(item.split("=", 1) for item in
                            str(_value(config, "sasl.oauthbearer.config") or "").split()
                            if "=" in item)
            username = (settings.get("principal") or options.get("unsecuredLoginStringClaim_sub")
                        or username)
            password = ""  # an unsecured token carries no secret
        if username is None or password is None:
            raise ConfigError(f"SASL/{mechanism} needs a user name and a password: set "
                              "sasl.username and sasl.password, or sasl.jaas.config")
        sasl = SaslCredentials(mechanism, str(username), str(password))
    return ClientSecurity(protocol, ssl_context, sasl)
