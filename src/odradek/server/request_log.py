"""The request log, as Kafka's `kafka.request.logger`: at DEBUG one line per completed request
(Kafka's "Completed request:{...}" form, as JSON: header, api name, connection, listener,
principal, client host, total time); at WARN the requests refused without an answer and the
connections closed because of them, with the reason.

Zero cost when disabled: the network layer asks `enabled()` once per request (one
`isEnabledFor`, no formatting) before calling `completed`. Configure it like any logger (a
log4j-style file: `log4j.logger.kafka.request.logger=DEBUG, requestAppender`; see
`odradek.cli.log4j`).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from odradek.protocol.messages import API_BY_KEY

LOGGER_NAME = "kafka.request.logger"
logger = logging.getLogger(LOGGER_NAME)


def enabled() -> bool:
    """Whether completed requests are logged (DEBUG); ask once per request."""
    return logger.isEnabledFor(logging.DEBUG)


def _api_name(api_key: int) -> str:
    api = API_BY_KEY.get(api_key)
    return api.name if api is not None else f"UNKNOWN({api_key})"


def completed(header: Any, connection_id: str, listener: str, security_protocol: str,
              principal: str, client_host: str, received_ns: int) -> None:
    """One DEBUG line for a request that got its response (call only when `enabled()`)."""
    total_ms = (time.monotonic_ns() - received_ns) / 1e6
    logger.debug("Completed request:%s", json.dumps({
        "requestHeader": {"requestApiKey": header.request_api_key,
                          "requestApiVersion": header.request_api_version,
                          "correlationId": header.correlation_id,
                          "clientId": header.client_id},
        "api": _api_name(header.request_api_key),
        "connection": connection_id,
        "totalTimeMs": round(total_ms, 3),
        "securityProtocol": security_protocol,
        "principal": principal,
        "listener": listener,
        "clientHost": client_host,
    }, separators=(",", ":")))


def closed(connection_id: str, principal: str, reason: str, header: Any = None) -> None:
    """One WARN line for a connection closed instead of answering (an unsupported version or
    API, a malformed request, a request out of SASL order, an expired session...)."""
    if not logger.isEnabledFor(logging.WARNING):
        return
    if header is not None:
        logger.warning("Closing connection %s (principal %s, client id %s) after %s v%d: %s",
                       connection_id, principal, header.client_id,
                       _api_name(header.request_api_key), header.request_api_version, reason)
    else:
        logger.warning("Closing connection %s (principal %s): %s", connection_id, principal,
                       reason)
