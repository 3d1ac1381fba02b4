"""TLS contexts from Kafka's `ssl.*` configs (PEM key and trust stores).

`ssl_settings(lookup)` reads the settings of one listener (or client) through `lookup(name)`,
which answers a config name (e.g. "ssl.keystore.location") with its value or None; the broker
passes a lookup that prefers `listener.name.<listener>.ssl.*` overrides. Only PEM stores are
supported (`ssl.keystore.type=PEM`, `ssl.truststore.type=PEM`): Python's ssl module reads PEM.
Inline PEM (`ssl.keystore.certificate.chain`/`ssl.keystore.key`, `ssl.truststore.certificates`)
is written to a private temporary file only for the time OpenSSL takes to load it.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from odradek.config.types import ConfigError, Password

Lookup = Callable[[str], Any]

_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
                 "TLSv1.1": ssl.TLSVersion.TLSv1_1, "TLSv1": ssl.TLSVersion.TLSv1}
# IANA (Java) names of TLS 1.2 suites -> OpenSSL's names; Python cannot restrict the TLS 1.3
# suites, which are always enabled with TLS 1.3.
_IANA_SUITE = re.compile(r"TLS_(ECDHE_RSA|ECDHE_ECDSA|DHE_RSA|RSA)_WITH_"
                         r"(AES_(128|256)_GCM_SHA(256|384)|CHACHA20_POLY1305_SHA256)")
_TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                 "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                 "TLS_AES_128_CCM_8_SHA256"}


def _text(value: Any) -> str | None:
    if isinstance(value, Password):
        value = value.value
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return [str(item).strip() for item in value if str(item).strip()]


def openssl_cipher_names(suites: list[str]) -> str:
    """Kafka's `ssl.cipher.suites` (IANA or OpenSSL names) as an OpenSSL cipher string."""
    names = []
    for suite in suites:
        if suite in _TLS13_SUITES:
            continue
        match = _IANA_SUITE.fullmatch(suite)
        if match is None:
            names.append(suite)  # already an OpenSSL name
            continue
        kx = {"RSA": "", "ECDHE_RSA": "ECDHE-RSA-", "ECDHE_ECDSA": "ECDHE-ECDSA-",
              "DHE_RSA": "DHE-RSA-"}[match.group(1)]
        cipher = ("CHACHA20-POLY1305" if match.group(2).startswith("CHACHA")
                  else f"AES{match.group(3)}-GCM-SHA{match.group(4)}")
        names.append(kx + cipher)
    return ":".join(names)


@contextlib.contextmanager
def _pem_file(content: str) -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="odradek-pem-")
    path = os.path.join(directory, "store.pem")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(content)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _check_pem_type(lookup: Lookup, name: str, has_store: bool) -> None:
    store_type = (_text(lookup(name)) or "JKS").upper()
    if has_store and store_type != "PEM":
        raise ConfigError(f"Invalid value {store_type} for configuration {name}: Odradek "
                          "reads PEM stores only (set it to PEM)")


def _load_keystore(context: ssl.SSLContext, lookup: Lookup) -> bool:
    """Loads the key and certificate chain, if configured; True when one was."""
    chain = _text(lookup("ssl.keystore.certificate.chain"))
    key = _text(lookup("ssl.keystore.key"))
    location = _text(lookup("ssl.keystore.location"))
    password = _text(lookup("ssl.key.password")) or _text(lookup("ssl.keystore.password"))
    if chain is None and key is None and location is None:
        return False
    if location is not None and os.path.splitext(location)[1].lower() in (".jks", ".p12",
                                                                          ".pfx") or _text(lookup("ssl.keystore.type")) not in (None, "JKS", "PEM", "jks", "pem"):
        _check_pem_type(lookup, "ssl.keystore.type", True)
    try:
        if chain is not None or key is not None:
            if chain is None or key is None:
                raise ConfigError("Both ssl.keystore.certificate.chain and ssl.keystore.key "
                                  "must be set for a PEM key store given inline")
            with _pem_file(key + "\n" + chain + "\n") as path:
                context.load_cert_chain(path, password=password)
        else:
            context.load_cert_chain(location, password=password)  # type: ignore[arg-type]
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"Failed to load the SSL key store "
                          f"({location or 'ssl.keystore.key'}): {exc}") from exc
    return True


def _load_truststore(context: ssl.SSLContext, lookup: Lookup) -> bool:
    certificates = _text(lookup("ssl.truststore.certificates"))
    location = _text(lookup("ssl.truststore.location"))
    if certificates is None and location is None:
        return False
    try:
        if certificates is not None:
            context.load_verify_locations(cadata=certificates)
        else:
            context.load_verify_locations(cafile=location)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"Failed to load the SSL trust store "
                          f"({location or 'ssl.truststore.certificates'}): {exc}") from exc
    return True


def _apply_protocols_and_ciphers(context: ssl.SSLContext, lookup: Lookup) -> None:
    protocols = _list(lookup("ssl.enabled.protocols")) or ["TLSv1.2", "TLSv1.3"]
    versions = []
    for protocol in protocols:
        if protocol not in _TLS_VERSIONS:
            raise ConfigError(f"Invalid value {protocol} for configuration "
                              "ssl.enabled.protocols: unknown TLS protocol")
        versions.append(_TLS_VERSIONS[protocol])
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)
    suites = _list(lookup("ssl.cipher.suites"))
    if suites:
        names = openssl_cipher_names(suites)
        if names:
            try:
                context.set_ciphers(names)
            except ssl.SSLError as exc:
                raise ConfigError(f"Invalid value {suites} for configuration "
                                  f"ssl.cipher.suites: {exc}") from exc


def server_context(lookup: Lookup, *, client_auth: str = "none") -> ssl.SSLContext:
    """The TLS context of a broker listener. `client_auth` is `ssl.client.auth`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if not _load_keystore(context, lookup):
        raise ConfigError("An SSL listener needs a key store: set ssl.keystore.location or "
                          "ssl.keystore.certificate.chain and ssl.keystore.key "
                          "(ssl.keystore.type=PEM)")
    has_trust = _load_truststore(context, lookup)
    mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
            "none": ssl.CERT_NONE}.get(client_auth.lower())
    if mode is None:
        raise ConfigError(f"Invalid value {client_auth} for configuration ssl.client.auth")
    if mode != ssl.CERT_NONE and not has_trust:
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    context.verify_mode = mode
    _apply_protocols_and_ciphers(context, lookup)
    return context


def client_context(lookup: Lookup) -> ssl.SSLContext:
    """The TLS context of a client, from Kafka's Java names or librdkafka's
    (`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    identification = lookup("ssl.endpoint.identification.algorithm")
    identification = "https" if identification is None else str(identification).strip()
    context.check_hostname = identification.lower() == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    if not _load_truststore(context, lookup):
        ca_location = _text(lookup("ssl.ca.location"))
        if ca_location is not None:
            try:
                context.load_verify_locations(cafile=ca_location)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(f"Failed to load ssl.ca.location {ca_location}: {exc}") from exc
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if not _load_keystore(context, lookup):
        certificate = _text(lookup("ssl.certificate.location"))
        key = _text(lookup("ssl.key.location"))
        if certificate is not None:
            try:
                context.load_cert_chain(certificate, keyfile=key,
                                        password=_text(lookup("ssl.key.password")))
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(f"Failed to load ssl.certificate.location {certificate}: "
                                  f"{exc}") from exc
    _apply_protocols_and_ciphers(context, lookup)
    return context
