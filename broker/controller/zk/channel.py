"""Requests from the controller to the brokers (Kafka's ControllerChannelManager).

One queue, one connection and one sender task per live broker, to the broker's inter-broker
listener. Requests to one broker go in the order the controller made them (a LeaderAndIsr must
never overtake an earlier one); each is sent until it is answered: a lost connection is
reopened after a backoff (broker/retry.py) and the request resent, for as long as the broker is
alive. When the broker leaves, its queue and connection go with it: what was not sent is
dropped (the broker learns the state again when it returns, as in Kafka).

Requests are built by the controller (they carry its id and epoch and the target's broker
epoch); the sender only sends them. A caller may wait for the answer (StopReplica before a topic's
znodes go), bounded by its own cancel scope.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from broker.address import format_host_port
from broker.client.connection import BrokerConnection, ClientError, open_connection
from broker.protocol.errors import KafkaError
from broker.protocol.schema import Message
from broker.retry import Backoff, worth_reporting

if TYPE_CHECKING:
    from broker.client.connection import ClientSecurity

__all__ = ["ControllerChannel", "Sent"]

log = logging.getLogger(__name__)

# Reconnect backoff to a broker that is registered but not answering (Kafka's controller uses
# the socket timeout and reconnect.backoff.ms).
_BACKOFF = Backoff(0.1, 2.0)


@dataclass(slots=True)
class Sent:
    """One queued request; ``done`` is set once it was answered (``response``) or dropped
    (``response`` None: the broker left or the controller resigned)."""

    request: Message
    on_response: Callable[[Any], None] | None = None
    done: trio.Event = field(default_factory=trio.Event)
    response: Any = None


class _BrokerQueue:
    def __init__(self, broker_id: int, host: str, port: int) -> None:
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.send, self.receive = trio.open_memory_channel[Sent](math.inf)
        self.scope = trio.CancelScope()


class ControllerChannel:
    """Per-broker request queues; run :meth:`run` in the controller's nursery."""

    def __init__(self, *, request_timeout_s: float, client_id: str, security: ClientSecurity | None = None) -> None:
        """`security`: TLS and SASL toward the brokers' inter-broker listener; None: PLAINTEXT."""
        self._timeout = request_timeout_s
        self._client_id = client_id
        self._security = security
        self._queues: dict[int, _BrokerQueue] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            for queue in self._queues.values():
                _drop(queue)
            self._queues.clear()

    def brokers(self) -> list[int]:
        return list(self._queues)

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        """Start a queue to ``broker_id`` (replacing one to an old address)."""
        existing = self._queues.get(broker_id)
        if existing is not None:
            if (existing.host, existing.port) == (host, port):
                return
            self.remove_broker(broker_id)
        if self._nursery is None:
            raise RuntimeError("the controller channel is not running")
        queue = _BrokerQueue(broker_id, host, port)
        self._queues[broker_id] = queue
        self._nursery.start_soon(self._sender, queue)

    def remove_broker(self, broker_id: int) -> None:
        queue = self._queues.pop(broker_id, None)
        if queue is not None:
            queue.scope.cancel()
            _drop(queue)

    def send(self, broker_id: int, request: Message, on_response: Callable[[Any], None] | None = None) -> Sent:
        """Queue ``request`` to ``broker_id``; a broker without a queue drops it at once."""
        item = Sent(request, on_response)
        queue = self._queues.get(broker_id)
        if queue is None:
            item.done.set()
            return item
        queue.send.send_nowait(item)
        return item

    async def _sender(self, queue: _BrokerQueue) -> None:
        address = format_host_port(queue.host, queue.port)
        try:
            await self._send_forever(queue, address)
        finally:
            _drop(queue)

    async def _send_forever(self, queue: _BrokerQueue, address: str) -> None:
        failures = 0
        pending: list[Sent] = []  # the request being sent: resent on a new connection
        try:
            with queue.scope:
                while True:
                    try:
                        async with open_connection(queue.host, queue.port, client_id=self._client_id,
                                                   request_timeout_s=self._timeout,
                                                   security=self._security) as conn:
                            if failures:
                                log.info("controller connection to broker %d (%s) restored",
                                         queue.broker_id, address)
                            failures = 0
                            while True:
                                if not pending:
                                    pending.append(await queue.receive.receive())
                                await self._deliver(conn, queue, pending[0])
                                pending.clear()
                    except (ClientError, OSError) as exc:
                        failures += 1
                        if worth_reporting(failures):
                            log.warning("controller cannot reach broker %d at %s (%s); retrying while it "
                                        "is registered", queue.broker_id, address, exc)
                    await trio.sleep(_BACKOFF.delay(failures))
        finally:
            for item in pending:
                item.done.set()

    async def _deliver(self, conn: BrokerConnection, queue: _BrokerQueue, item: Sent) -> None:
        try:
            response = await conn.request(item.request)
        except KafkaError as exc:
            # No common version, or an answer we cannot decode: resending cannot help.
            log.error("broker %d cannot take %s: %s", queue.broker_id, type(item.request).__name__, exc)
            item.done.set()
            return
        item.response = response
        if item.on_response is not None:
            try:
                item.on_response(response)
            except Exception:  # noqa: BLE001 - a bad answer must not stop the queue
                log.exception("handling the answer of broker %d failed", queue.broker_id)
        item.done.set()


def _drop(queue: _BrokerQueue) -> None:
    """Release everyone waiting on requests that will never be sent."""
    while True:
        try:
            item = queue.receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            break
        item.done.set()
    queue.send.close()
