"""Makes a throwaway certificate authority, a broker certificate and a client one for the
secure example (`make run-secure`, config/secure.properties), with the `cryptography` package
(in the test extra: `pip install -e '.[test]'`).

    python tools/secure_example.py [DIRECTORY]   # default: odradek-secure

DIRECTORY gets ca.pem (the CA certificate: the trust store), broker.pem (the broker's key and
certificate chain: its PEM key store, for localhost and 127.0.0.1), client.crt/client.key (a
client certificate, CN=client) and client.properties (what a client or tool needs to connect
to the example's SASL_SSL listener as the SCRAM user `admin`). Existing files are kept.
For tests and development only: the CA key is thrown away, nothing here is secret.
"""

from __future__ import annotations

import datetime
import ipaddress
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

EXAMPLE_USER, EXAMPLE_PASSWORD = "admin", "admin-secret"


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


class CertificateAuthority:
    """A self-signed CA (EC P-256) that issues node and client certificates."""

    def __init__(self, directory: Path, name: str = "Odradek Test CA",
                 valid_days: int = 30) -> None:
        self.directory = directory
        self.valid_days = valid_days
        directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(name)
        self.cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM).decode()
        self.cert_path = directory / f"{name.replace(' ', '_')}.pem"
        self.cert_path.write_text(self.cert_pem)

    def issue(self, common_name: str, *, unit: str | None = None, server: bool = False,
              password: bytes | None = None,
              host_names: tuple[str, ...] = ("localhost", "127.0.0.1")) -> Issued:
        """A certificate signed by this CA: for a node (`server`: server and client
        authentication, named `host_names`) or a client; its key encrypted with `password`."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server
                  else [ExtendedKeyUsageOID.CLIENT_AUTH])
        builder = (
            x509.CertificateBuilder().subject_name(_name(common_name, unit))
            .issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=self.valid_days))
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [_san(name) for name in host_names]), critical=False)
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


def make_example(directory: Path, bootstrap: str = "localhost:9092") -> Path:
    """The example's files in `directory` (kept when they exist); returns client.properties."""
    client_properties = directory / "client.properties"
    if (directory / "ca.pem").exists() and client_properties.exists():
        return client_properties
    ca = CertificateAuthority(directory)
    ca.cert_path.rename(directory / "ca.pem")
    ca.issue("broker", server=True)
    ca.issue("client", unit="Clients")
    client_properties.write_text(
        f"bootstrap.servers={bootstrap}\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{EXAMPLE_USER}" password="{EXAMPLE_PASSWORD}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={(directory / 'ca.pem').resolve()}\n")
    return client_properties


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "odradek-secure")
    print(f"secure example files in {target}/: {make_example(target)}")
