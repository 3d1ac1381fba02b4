"""The principal of a TLS connection: the client certificate's subject as Kafka formats it
(X500Principal.getName(RFC2253): most specific RDN first, short attribute keywords, RFC 2253
escaping) mapped by `ssl.principal.mapping.rules` (Kafka's SslPrincipalMapper).

Rules, comma separated: `DEFAULT` (the DN as is) or `RULE:pattern/replacement/[LU]` (when the
whole DN matches the Java regex `pattern`, the replacement with `$1` back references, then
lower- or upper-cased); the first rule that matches wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from odradek.config.types import ConfigError

ANONYMOUS = "User:ANONYMOUS"

# The keywords X500Principal's RFC 2253 form uses; other attributes go by their OID.
_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
_OIDS = {"emailAddress": "1.2.840.113549.1.9.1", "serialNumber": "2.5.4.5",
         "title": "2.5.4.12", "surname": "2.5.4.4", "givenName": "2.5.4.42",
         "initials": "2.5.4.43", "generationQualifier": "2.5.4.44",
         "dnQualifier": "2.5.4.46", "pseudonym": "2.5.4.65", "postalCode": "2.5.4.17"}
# DER string tag of the value X500Principal prints as #hex for OID attributes.
_IA5_ATTRIBUTES = {"emailAddress"}


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_hex(attribute: str, value: str) -> str:
    data = value.encode()
    tag = 0x16 if attribute in _IA5_ATTRIBUTES else 0x13 if attribute in (
        "serialNumber", "dnQualifier") else 0x0C
    length = len(data)
    if length < 0x80:
        header = bytes([tag, length])
    else:
        size = length.to_bytes((length.bit_length() + 7) // 8, "big")
        header = bytes([tag, 0x80 | len(size)]) + size
    return "#" + (header + data).hex()


def format_subject(subject: tuple) -> str:
    """An `ssl.SSLSocket.getpeercert()` subject (RDNs in certificate order) as Kafka's
    RFC 2253 distinguished name."""
    rdns = []
    for rdn in reversed(subject):
        parts = []
        for attribute, value in rdn:
            keyword = _KEYWORDS.get(attribute)
            if keyword is not None:
                parts.append(f"{keyword}={_escape(value)}")
            else:
                oid = _OIDS.get(attribute, attribute)
                parts.append(f"{oid}={_der_hex(attribute, value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_PARSER = re.compile(_RULE)
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")


def _java_replacement(replacement: str, group_count: int) -> str:
    """A java.util.regex replacement ($n back references, \\ escapes) as Python's; Kafka
    escapes references to groups the pattern does not have, so they stay literal."""
    out, i = [], 0
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1].replace("\\", "\\\\"))
            i += 2
        elif ch == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                j += 1
            number = int(replacement[i + 1:j])
            out.append(f"\\g<{number}>" if number <= group_count else replacement[i:j])
            i = j
        else:
            out.append("\\\\" if ch == "\\" else ch)
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class _Rule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(_java_replacement(self.replacement, self.pattern.groups), dn)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result


class SslPrincipalMapper:
    def __init__(self, rules: str | None = "DEFAULT") -> None:
        self.rules = self._parse(rules if rules is not None else "DEFAULT")

    @staticmethod
    def _parse(text: str) -> list[_Rule]:
        rules: list[_Rule] = []
        for match in _RULE_SPLITTER.finditer(text.strip()):
            rule = match.group(1)
            parsed = _RULE_PARSER.match(rule)
            if parsed is None or parsed.end() != len(rule):
                raise ConfigError(f"Invalid rule: `{rule}`")
            if parsed.group(1) is not None:
                rules.append(_Rule(True))
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as exc:
                    raise ConfigError(f"Invalid rule: `{rule}`: {exc}") from exc
                rules.append(_Rule(False, pattern, parsed.group(4), parsed.group(6) == "L",
                                   parsed.group(6) == "U"))
            elif parsed.group(7):
                raise ConfigError(f"Invalid rule: `{rule}`")
            if match.end() == len(text.strip()):
                break
        return rules

    def name(self, dn: str) -> str:
        """The short name of `dn`; raises ValueError when no rule applies (Kafka's
        NoMatchingRule, which fails the connection)."""
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise ValueError(f"No rules apply to {dn}")


def certificate_principal(peer_cert: dict | None, mapper: SslPrincipalMapper) -> str:
    """The principal of a TLS connection: ANONYMOUS without a client certificate."""
    if not peer_cert or not peer_cert.get("subject"):
        return ANONYMOUS
    return "User:" + mapper.name(format_subject(peer_cert["subject"]))
