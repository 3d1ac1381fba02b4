"""This broker's membership of the cluster, as the active controller sees it (Kafka's
BrokerLifecycleManager): register, heartbeat, get unfenced, and shut down in a controlled way.

The manager registers the broker with the active controller (BrokerRegistration: a new
incarnation id per process, the advertised listeners, the supported features, the rack) and then
heartbeats every `broker.heartbeat.interval.ms` with the offset of the metadata it has replayed.
The broker starts fenced; the controller unfences it once that offset reaches its registration.
While fenced, a heartbeat also goes out as soon as the metadata image moves past the
registration, so start-up does not wait a whole interval.

Errors: NOT_CONTROLLER or an unreachable controller → ask again (the quorum names the new leader)
after `controller.quorum.retry.backoff.ms`-style backoff; STALE_BROKER_EPOCH or
BROKER_ID_NOT_REGISTERED (the controller does not know us: Kafka answers an unregistered
broker STALE_BROKER_EPOCH) →
register again; DUPLICATE_BROKER_REGISTRATION (our previous incarnation's session is still
alive) → retry until it expires.

`controlled_shutdown()` heartbeats with `want_shutdown` until the controller says the broker may
go (its leaderships moved away and it has seen that), bounded by a timeout; meanwhile a heartbeat
goes out whenever the image moves (and at least every 100 ms), so the shutdown takes a few
metadata commits rather than heartbeat intervals.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.controller.cluster_control import BrokerRegistrationRequest
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError, ProtocolError

log = logging.getLogger("odradek.broker.lifecycle")

BROKER_REGISTRATION_VERSION = 3
BROKER_HEARTBEAT_VERSION = 1
RETRY_BACKOFF_MS = 100

# Sends a request to the active controller at a version; raises if it cannot.
ControllerSend = Callable[[m.Message, int], Awaitable[m.Message]]


class BrokerLifecycleManager:
    def __init__(self, registration: Callable[[], BrokerRegistrationRequest], *,
                 send: ControllerSend, metadata_offset: Callable[[], int],
                 heartbeat_interval_ms: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self._registration = registration
        self._send = send
        self._metadata_offset = metadata_offset
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.clock = clock
        self.incarnation_id = uuid.uuid4()
        self.broker_id = -1
        self.broker_epoch = -1
        self.fenced = True
        self._want_shutdown = False
        self._unfenced = asyncio.Event()
        self._may_shut_down = asyncio.Event()
        self._registered = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def wait_until_registered(self) -> int:
        await self._registered.wait()
        return self.broker_epoch

    async def wait_until_unfenced(self) -> None:
        await self._unfenced.wait()

    def on_metadata(self, metadata_offset: int) -> None:
        """The broker's image moved: a fenced broker that may now be caught up says so."""
        if self._want_shutdown or (self.fenced and 0 <= self.broker_epoch <= metadata_offset):
            self._wakeup.set()

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Asks the controller to move this broker's leaderships away and waits until it may
        shut down (True) or the timeout passes (False)."""
        if self._task is None or self.broker_epoch < 0:
            return False
        self._want_shutdown = True
        self._wakeup.set()
        try:
            await asyncio.wait_for(self._may_shut_down.wait(), timeout_s)
        except TimeoutError:
            log.warning("broker %d: controlled shutdown did not finish within %.1f s",
                        self.broker_id, timeout_s)
            return False
        log.info("broker %d: controlled shutdown complete", self.broker_id)
        return True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    # -- the loop
    async def _run(self) -> None:
        while not self._may_shut_down.is_set():
            try:
                if self.broker_epoch < 0:
                    await self._register()
                else:
                    await self._heartbeat()
                    # In controlled shutdown, the next step needs only the image to move.
                    await self._wait(RETRY_BACKOFF_MS if self._want_shutdown
                                     else self.heartbeat_interval_ms)
                    continue
            except KafkaError as exc:
                self._on_error(exc)
            except (ProtocolError, OSError, TimeoutError) as exc:
                log.debug("broker lifecycle: controller unreachable: %s", exc)
            await self._wait(RETRY_BACKOFF_MS)

    async def _wait(self, delay_ms: int) -> None:
        timer = self.clock.call_later(delay_ms / 1000, self._wakeup.set)
        try:
            await self._wakeup.wait()
        finally:
            timer.cancel()
            self._wakeup.clear()

    def _on_error(self, exc: KafkaError) -> None:
        if exc.code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            log.warning("broker %d: the controller does not know epoch %d (%s): registering "
                        "again", self.broker_id, self.broker_epoch, exc.code.name)
            self.broker_epoch = -1
            self._set_fenced(True)
        elif exc.code not in (ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT):
            log.warning("broker lifecycle: %s", exc)

    async def _register(self) -> None:
        registration = self._registration()
        self.broker_id = registration.broker_id
        request = m.BrokerRegistrationRequest(
            broker_id=registration.broker_id, cluster_id=registration.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=[m.BrokerRegistrationRequest.Listener(name=n, host=h, port=p,
                                                            security_protocol=sp)
                       for n, h, p, sp in registration.endpoints],
            features=[m.BrokerRegistrationRequest.Feature(name=name, min_supported_version=lo,
                                                          max_supported_version=hi)
                      for name, (lo, hi) in sorted(registration.features.items())],
            rack=registration.rack,
            previous_broker_epoch=self.broker_epoch)
        response = await self._send(request, BROKER_REGISTRATION_VERSION)
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(response.error_code)
        self.broker_epoch = response.broker_epoch
        self._set_fenced(True)
        self._registered.set()
        log.info("broker %d registered with the controller at epoch %d", self.broker_id,
                 self.broker_epoch)
        self._wakeup.set()  # heartbeat at once: the image may already hold the registration

    async def _heartbeat(self) -> None:
        request = m.BrokerHeartbeatRequest(
            broker_id=self.broker_id, broker_epoch=self.broker_epoch,
            current_metadata_offset=self._metadata_offset(),
            want_fence=False, want_shut_down=self._want_shutdown)
        response = await self._send(request, BROKER_HEARTBEAT_VERSION)
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(response.error_code)
        if self.fenced and not response.is_fenced:
            log.info("broker %d: unfenced by the controller", self.broker_id)
        elif not self.fenced and response.is_fenced and not self._want_shutdown:
            log.warning("broker %d: fenced by the controller", self.broker_id)
        self._set_fenced(response.is_fenced)
        if response.should_shut_down:
            self._may_shut_down.set()

    def _set_fenced(self, fenced: bool) -> None:
        self.fenced = fenced
        if fenced:
            self._unfenced.clear()
        else:
            self._unfenced.set()
