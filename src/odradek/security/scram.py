"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), sans-I/O, both sides, as Kafka's
ScramSaslServer/ScramSaslClient speak them (no channel binding; Kafka's `tokenauth` extension
is not supported).

A stored credential is (salt, stored key, server key, iterations): the password itself is
never kept. `ScramServer` and `ScramClient` each take the other side's messages as bytes and
return the next message; a failure raises `SaslFailure`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

# ScramMechanism: Kafka's ids (in AlterUserScramCredentials and UserScramCredentialRecord).
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISM_IDS = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISM_NAMES = {id_: name for name, id_ in MECHANISM_IDS.items()}
_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
# Kafka's limits on a credential's iterations (ScramMechanism.minIterations, the controller's
# maximum).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class SaslFailure(Exception):
    """An authentication exchange failed. `client_message` is what the client is told (Kafka
    keeps the details of a SCRAM failure from the client, so as not to reveal whether the
    user exists); `str()` is for the broker's log and never holds a password."""

    def __init__(self, message: str, client_message: str | None = None) -> None:
        super().__init__(message)
        self.client_message = client_message


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hash_name(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {mechanism}") from None


def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password.encode(), salt, iterations)


def credential_from_salted_password(mechanism: str, salted: bytes, salt: bytes,
                                    iterations: int) -> ScramCredential:
    """What the broker stores (AlterUserScramCredentials carries the salted password)."""
    hash_name = _hash_name(mechanism)
    client_key = _hmac(hash_name, salted, b"Client Key")
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = _hmac(hash_name, salted, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


def credential_from_password(mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    salt = salt if salt is not None else os.urandom(32)
    return credential_from_salted_password(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def encode_sasl_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def decode_sasl_name(name: str) -> str:
    if "=" in name.replace("=3D", "").replace("=2C", ""):
        raise SaslFailure(f"Invalid SCRAM user name encoding: {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            continue  # an extension (Kafka's `key=value` after the nonce) or junk: checked below
        out.setdefault(key, value)
    return out


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, TypeError):
        raise SaslFailure(f"Invalid SCRAM {what}: not base64") from None


class ScramServer:
    """The broker's side of one SCRAM exchange. `lookup(user)` returns the user's credential
    for this mechanism, or None."""

    def __init__(self, mechanism: str, lookup) -> None:
        self.mechanism = mechanism
        self.hash_name = _hash_name(mechanism)
        self._lookup = lookup
        self._state = "first"
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SCRAM message: not UTF-8") from None
        if self._state == "first":
            return self._client_first(text)
        if self._state == "final":
            return self._client_final(text)
        raise SaslFailure("Unexpected SCRAM message after the exchange ended")

    def _client_first(self, text: str) -> bytes:
        # gs2-header: "n,," or "y,," (no channel binding), optionally "n,a=authzid,"
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or (
                parts[1] and not parts[1].startswith("a=")):
            raise SaslFailure("Invalid SCRAM client first message")
        bare = parts[2]
        attrs = _attributes(bare)
        if not bare.startswith("n=") or "r" not in attrs or not attrs["r"]:
            raise SaslFailure("Invalid SCRAM client first message")
        if "tokenauth=true" in bare.split(","):
            raise SaslFailure("Delegation token authentication is not supported")
        username = decode_sasl_name(attrs["n"])
        authzid = parts[1][2:]
        if authzid and decode_sasl_name(authzid) != username:
            raise SaslFailure("Authentication failed: Client requested an authorization id "
                              "that is different from username")
        credential = self._lookup(username)
        self.username = username
        if credential is None:
            raise SaslFailure(f"Authentication failed: Invalid user credentials for {username!r}")
        if credential.iterations < MIN_ITERATIONS:
            raise SaslFailure(f"Iterations {credential.iterations} is less than the minimum "
                              f"{MIN_ITERATIONS} for {self.mechanism}")
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = attrs["r"] + secrets.token_urlsafe(24)
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()}"
                              f",i={credential.iterations}")
        self._state = "final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        self._state = "done"
        without_proof, sep, proof_text = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        if not sep or "c" not in attrs or "r" not in attrs:
            raise SaslFailure("Invalid SCRAM client final message")
        if attrs["r"] != self._nonce:
            raise SaslFailure("Invalid client nonce in the final client message.")
        proof = _b64decode(proof_text, "client proof")
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self.hash_name, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise SaslFailure("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(),
                                   credential.stored_key):
            raise SaslFailure(f"Invalid client credentials of {self.username!r}")
        server_signature = _hmac(self.hash_name, credential.server_key, auth_message)
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client's side: `first()`, then `final(server_first)`, then `verify(server_final)`."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self.hash_name = _hash_name(mechanism)
        self.username = username
        self.password = password
        self._nonce = secrets.token_urlsafe(24)
        self._client_first_bare = f"n={encode_sasl_name(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._client_first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = _attributes(text)
        if "e" in attrs:
            raise SaslFailure(f"SCRAM error from the server: {attrs['e']}")
        nonce = attrs.get("r", "")
        if not nonce.startswith(self._nonce) or "s" not in attrs or "i" not in attrs:
            raise SaslFailure("Invalid SCRAM server first message")
        salt = _b64decode(attrs["s"], "salt")
        iterations = int(attrs["i"])
        if iterations < MIN_ITERATIONS:
            raise SaslFailure(f"Requested iterations {iterations} is less than the minimum "
                              f"{MIN_ITERATIONS} for {self.mechanism}")
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.hash_name, salted, b"Client Key")
        stored_key = hashlib.new(self.hash_name, client_key).digest()
        signature = _hmac(self.hash_name, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(self.hash_name, salted, b"Server Key")
        self._server_signature = _hmac(self.hash_name, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode())
        if "e" in attrs:
            raise SaslFailure(f"SCRAM error from the server: {attrs['e']}")
        if not hmac.compare_digest(_b64decode(attrs.get("v", ""), "server signature"),
                                   self._server_signature):
            raise SaslFailure("Invalid server signature in the SCRAM server final message")


class PlainServer:
    """SASL/PLAIN (RFC 4616) against a user table, with Kafka's PlainSaslServer messages."""

    INVALID = "Authentication failed: Invalid username or password"

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailure(f"Invalid SASL/PLAIN response: expected 3 tokens, got "
                              f"{len(parts)}")
        try:
            authzid, username, password = (part.decode() for part in parts)
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise SaslFailure("Authentication failed: username not specified",
                              "Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified",
                              "Authentication failed: password not specified")
        self.username = username
        expected = self._users.get(username)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslFailure(f"{self.INVALID} (user {username!r})", self.INVALID)
        if authzid and authzid != username:
            message = ("Authentication failed: Client requested an authorization id that is "
                       "different from username")
            raise SaslFailure(message, message)
        self.complete = True
        return b""


def plain_client_token(username: str, password: str) -> bytes:
    return b"\x00" + username.encode() + b"\x00" + password.encode()
