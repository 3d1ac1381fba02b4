"""A throwaway CA and certificates for TLS tests, made with the `cryptography` package."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str, unit: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                  x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Odradek Test")]
    if unit:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


@dataclass
class Issued:
    cert_pem: str
    key_pem: str
    cert_path: Path
    key_path: Path
    combined_path: Path  # key + certificate chain in one PEM file (Kafka's PEM key store)


class TestCA:
    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, name: str = "Odradek Test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = _name(name)
        self.cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM).decode()
        self.cert_path = directory / f"{name.replace(' ', '_')}.pem"
        self.cert_path.write_text(self.cert_pem)

    def issue(self, common_name: str, *, unit: str | None = None, server: bool = False,
              password: bytes | None = None,
              host_names: tuple[str, ...] = ("localhost", "127.0.0.1")) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder().subject_name(_name(common_name, unit))
            .issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            # a node's certificate also authenticates it to its peers (inter-broker mTLS)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server
                else [ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                _san(name) for name in host_names]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        encryption = (serialization.BestAvailableEncryption(password) if password
                      else serialization.NoEncryption())
        key_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8, encryption).decode()
        cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        stem = self.directory / common_name
        cert_path, key_path = Path(f"{stem}.crt"), Path(f"{stem}.key")
        combined = Path(f"{stem}.pem")
        cert_path.write_text(cert_pem)
        key_path.write_text(key_pem)
        combined.write_text(key_pem + cert_pem)
        return Issued(cert_pem, key_pem, cert_path, key_path, combined)
