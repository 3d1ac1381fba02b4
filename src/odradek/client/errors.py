"""Client-side errors.

Everything a client call raises for a Kafka reason is a `KafkaError` (from the protocol
package): broker error codes keep their code and the broker's message; failures the client
detects itself map to the code Kafka's client uses for them, so ``err.retriable`` answers
"try again?" the same way for both.
"""

from __future__ import annotations

from odradek.config.types import ConfigError
from odradek.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "KafkaConfigError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "error_from_code",
    "raise_for",
]


class KafkaConnectionError(KafkaError):
    """The connection to a broker could not be opened or broke (Kafka's NetworkException).

    Retriable: requests in flight on the connection may or may not have been processed.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message)


class KafkaTimeoutError(KafkaError):
    """A request got no response in time, or a call ran past its deadline (Kafka's
    TimeoutException)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


# An invalid client configuration: Kafka's ConfigException, the config model's one error type.
KafkaConfigError = ConfigError


def error_from_code(code: int, message: str | None = None) -> KafkaError | None:
    """The error for a response's error code and message; None for NONE (0)."""
    if code == 0:
        return None
    return KafkaError(code, message or None)


def raise_for(code: int, message: str | None = None) -> None:
    """Raise the error of a response's error code (nothing for NONE)."""
    error = error_from_code(code, message)
    if error is not None:
        raise error
