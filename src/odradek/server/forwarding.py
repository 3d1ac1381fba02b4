"""Admin requests sent to any broker are carried out by the active controller (Kafka's
ForwardingManager, KIP-590).

On a broker listener, a forwardable request (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, IncrementalAlterConfigs, ...) is handled here when this node is the active
controller; otherwise it is wrapped whole (header and body, as the client sent it) in an
Envelope and sent to the quorum leader's controller listener, which unwraps it, runs the same
handler and wraps the answer. The client sees the controller's answer, re-framed with its own
correlation id. Auto-created topics (Metadata, FindCoordinator's `__consumer_offsets`) go the
same way as a CreateTopics request.

NOT_CONTROLLER (the leader moved or is still catching up) or an unreachable controller: the
request is sent again, to whoever the quorum names, until `request.timeout.ms`-style deadline;
after it, the local handler answers (NOT_CONTROLLER per item, which clients retry).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.controller.controller import OpResult, TopicSpec
from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError, ProtocolError
from odradek.security.acl import AclOperation

if TYPE_CHECKING:
    from odradek.controller.quorum import MetadataQuorum
    from odradek.server.network import RequestContext
    from odradek.server.node_channel import NodeChannel

log = logging.getLogger("odradek.forwarding")

ENVELOPE_API_KEY = 58
ENVELOPE_VERSION = 0
CREATE_TOPICS_VERSION = 7
RETRY_BACKOFF_S = 0.1
FORWARDING_TIMEOUT_MS = 30_000

Handler = Callable[..., Any]


class ForwardingManager:
    def __init__(self, node_id: int, quorum: MetadataQuorum, channel: NodeChannel | None, *,
                 timeout_ms: int = FORWARDING_TIMEOUT_MS, clock: Clock = SYSTEM_CLOCK) -> None:
        self.node_id = node_id
        self.quorum = quorum
        self.channel = channel
        self.timeout_ms = timeout_ms
        self.clock = clock

    def wrap(self, local: Handler) -> Handler:
        """The broker-listener handler of a forwardable API: local on the active controller,
        forwarded anywhere else."""
        async def forwarded(ctx: RequestContext, request: Any) -> Any:
            if not self._should_forward():
                return await _call(local, ctx, request)
            header = ctx.header
            response = await self.forward(
                header.request_api_key, header.request_api_version, request,
                client_id=header.client_id, principal=ctx.principal,
                client_host=ctx.client_host)
            return response if response is not None else await _call(local, ctx, request)
        return forwarded

    def _should_forward(self) -> bool:
        return self.channel is not None and not self.quorum.is_active

    async def forward(self, api_key: int, api_version: int, request: Any, *,
                      client_id: str | None, principal: str = "",
                      client_host: str = "") -> Any | None:
        """Forwards a request to the active controller and returns its answer, or None if no
        controller took it before the deadline. `principal`: whose request it is (empty: this
        broker's own, e.g. an auto-creation the broker already authorized; the controller then
        acts for the principal of the broker's connection)."""
        frame = framing.encode_request(api_key, api_version, 0, client_id, request)[4:]
        envelope = m.EnvelopeRequest(request_data=frame,
                                     request_principal=principal.encode(),
                                     client_host_address=_address_bytes(client_host))
        deadline = self.clock.monotonic() + self.timeout_ms / 1000
        while True:
            leader = self.quorum.leader_id
            if leader is not None and leader != self.node_id and self.channel is not None:
                try:
                    answer = await self.channel.send(leader, envelope,
                                                     api_version=ENVELOPE_VERSION)
                    if answer.error_code == ErrorCode.NONE:
                        _correlation_id, response = framing.decode_response(
                            answer.response_data, api_key, api_version)
                        return response
                    if answer.error_code != ErrorCode.NOT_CONTROLLER:
                        log.warning("controller %d refused a forwarded request (api %d): %s",
                                    leader, api_key, ErrorCode.from_code(answer.error_code).name)
                        return None
                except (ProtocolError, OSError, TimeoutError, KafkaError) as exc:
                    log.debug("cannot forward to controller %d: %s", leader, exc)
            elif leader == self.node_id and self.quorum.is_active:
                return None  # became the active controller meanwhile: handle it here
            if self.clock.monotonic() >= deadline:
                return None
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def create_topics(self, local: Callable[..., Any],
                            specs: Sequence[TopicSpec]) -> list[OpResult]:
        """Creates topics through the active controller (auto-creation): `local` is the
        controller's own create_topics, used when this node is the active controller."""
        if not self._should_forward():
            return await local(specs)
        Creatable = m.CreateTopicsRequest.CreatableTopic
        request = m.CreateTopicsRequest(
            topics=[Creatable(name=s.name, num_partitions=s.num_partitions,
                              replication_factor=s.replication_factor, assignments=[],
                              configs=[m.CreateTopicsRequest.CreatableTopicConfig(
                                  name=k, value=v) for k, v in s.configs.items()])
                    for s in specs],
            timeout_ms=self.timeout_ms, validate_only=False)
        response = await self.forward(19, CREATE_TOPICS_VERSION, request,
                                      client_id=f"broker-{self.node_id}-auto-create")
        if response is None:
            return await local(specs)
        by_name = {t.name: t for t in response.topics}
        return [OpResult(ErrorCode.from_code(by_name[s.name].error_code),
                         by_name[s.name].error_message) if s.name in by_name
                else OpResult.fail(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer for the topic")
                for s in specs]


class EnvelopeApis:
    """The controller listener's side: unwraps a forwarded request, runs its handler as if the
    client had sent it here, and wraps the answer."""

    def __init__(self, quorum: MetadataQuorum,
                 lookup: Callable[[int, int], Handler | None]) -> None:
        self.quorum = quorum
        self._lookup = lookup  # (api key, version) -> the handler of a forwardable API

    async def envelope(self, ctx: RequestContext, req: m.EnvelopeRequest):
        R = m.EnvelopeResponse
        if not self.quorum.is_active:
            return R(error_code=ErrorCode.NOT_CONTROLLER, response_data=None)
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):  # only brokers forward
            return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, response_data=None)
        try:
            header, inner = framing.decode_request(bytes(req.request_data))
        except ProtocolError as exc:
            # Kafka's EnvelopeUtils answers UNSUPPORTED_VERSION when the forwarded header or
            # body does not parse (INVALID_REQUEST is for a bad Envelope or a non-forwardable API).
            log.warning("malformed forwarded request from %s: %s", ctx.client_host, exc)
            return R(error_code=ErrorCode.UNSUPPORTED_VERSION, response_data=None)
        api_key, version = header.request_api_key, header.request_api_version
        handler = self._lookup(api_key, version)
        if handler is None:  # not a forwardable API, or a version we do not take
            return R(error_code=ErrorCode.INVALID_REQUEST, response_data=None)
        principal = (req.request_principal or b"").decode(errors="replace") or ctx.principal
        inner_ctx = dataclasses.replace(ctx, header=header, principal=principal,
                                        client_address=_address_text(req.client_host_address))
        response = await _call(handler, inner_ctx, inner)
        frame = framing.encode_response(api_key, version, header.correlation_id, response)
        return R(error_code=ErrorCode.NONE, response_data=frame[4:])


async def _call(handler: Handler, ctx: Any, request: Any) -> Any:
    result = handler(ctx, request)
    if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
        return await result
    return result


def _address_text(packed: bytes | None) -> str | None:
    try:
        return str(ipaddress.ip_address(bytes(packed))) if packed else None
    except ValueError:
        return None


def _address_bytes(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""
