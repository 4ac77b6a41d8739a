"""How the transaction coordinator's markers reach partition leaders (Kafka's
TransactionMarkerChannelManager, without its queues): the partitions of one transaction are
grouped by their leader now; this broker's own are appended in place (the WriteTxnMarkers
handler's path, no round trip), each other leader gets one WriteTxnMarkers request on the
inter-broker listener, with the inter-broker security, over a connection kept open for the next
transactions (one per broker, held by a task of :meth:`MarkerSender.run`, reopened when it
fails). What fails (no leader, a leader that does not answer or answers an error) is returned,
and the coordinator sends it again after a pause.

A partition whose topic was deleted is done, as Kafka's coordinator drops its marker: nobody
can read that transaction any more.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from broker.client.connection import BrokerConnection, ClientError, open_connection
from broker.coordinator.txn_coordinator import Markers
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from broker.server.context import BrokerServices
from broker.server.handlers.write_txn_markers import write_markers

if TYPE_CHECKING:
    from broker.client.connection import ClientSecurity

__all__ = ["MarkerSender"]

log = logging.getLogger(__name__)

Partition = tuple[str, int]


def _request(markers: Markers, partitions: list[Partition]) -> WriteTxnMarkersRequest:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=markers.producer_id, producer_epoch=markers.producer_epoch,
        transaction_result=markers.commit, coordinator_epoch=markers.coordinator_epoch,
        topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=sorted(indexes))
                for topic, indexes in sorted(by_topic.items())])])


def _failed(response: WriteTxnMarkersResponse, markers: Markers) -> set[Partition]:
    failed: set[Partition] = set()
    for result in response.markers:
        for topic in result.topics:
            for partition in topic.partitions:
                code = partition.error_code
                if code != ErrorCode.NONE:
                    if code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
                        # Kafka's coordinator gives these up: a newer epoch or coordinator decides.
                        log.warning("marker for producer %d on %s-%d refused: %s; dropped", markers.producer_id,
                                    topic.name, partition.partition_index, ErrorCode(code).name)
                        continue
                    failed.add((topic.name, partition.partition_index))
    return failed


class MarkerSender:
    """`send_markers` for the broker's TransactionCoordinator."""

    def __init__(self, services: BrokerServices, security: ClientSecurity | None) -> None:
        self._services = services
        self._security = security
        self._nursery: trio.Nursery | None = None
        self._connections: dict[int, tuple[tuple[str, int], BrokerConnection]] = {}
        self._opening: dict[int, trio.Lock] = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the connections to other brokers until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def _connection(self, broker_id: int, host: str, port: int) -> BrokerConnection:
        """The open connection to the broker at this address, opened when there is none (or
        the one there was failed, or the broker moved). Raises ClientError, OSError."""
        async with self._opening.setdefault(broker_id, trio.Lock()):
            cached = self._connections.get(broker_id)
            if cached is not None:
                if cached[0] == (host, port) and not cached[1].closed:
                    return cached[1]
                cached[1].close()
                del self._connections[broker_id]
            if self._nursery is None:
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "the marker sender is not running")
            conn: BrokerConnection = await self._nursery.start(self._hold, host, port)
            self._connections[broker_id] = ((host, port), conn)
            return conn

    async def _hold(self, host: str, port: int, *, task_status: trio.TaskStatus[BrokerConnection]) -> None:
        config = self._services.config
        started = False
        try:
            async with open_connection(host, port, client_id=f"broker-{config.broker_id}-txn-markers",
                                       request_timeout_s=config.request_timeout_ms / 1000 + 5,
                                       security=self._security) as conn:
                task_status.started(conn)
                started = True
                await conn.wait_closed()
        except (ClientError, KafkaError, OSError) as exc:
            if not started:
                raise
            log.debug("marker connection to %s:%d ended: %s", host, port, exc)

    async def request_broker(self, broker_id: int, request: Any, *, version: int | None = None) -> Any:
        """Send `request` to another broker on its inter-broker listener over the connection kept
        for it (also the partition leaders' verification questions to transaction coordinators,
        broker/server/txn_verification.py), answered at `version` or the highest both know.
        Raises KafkaError (BROKER_NOT_AVAILABLE: not registered; UNSUPPORTED_VERSION),
        ClientError (the connection failed: it is closed, the next request opens another),
        OSError."""
        conn = await self._connection_to(broker_id)
        try:
            return await conn.request(request, version=version)
        except ClientError:
            conn.close()  # its outcome is unknown: the next attempt opens a new one
            raise

    async def broker_version(self, broker_id: int, api_key: int) -> int:
        """The highest version of `api_key` both this broker and `broker_id` serve (opening the
        connection to it if needed); raises as :meth:`request_broker`."""
        return (await self._connection_to(broker_id)).version_for(api_key)

    async def _connection_to(self, broker_id: int) -> BrokerConnection:
        config = self._services.config
        broker = next((b for b in self._services.controller.brokers() if b.broker_id == broker_id), None)
        endpoint = broker.inter_broker_endpoint(config) if broker is not None else None
        if endpoint is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        return await self._connection(broker_id, endpoint.host, endpoint.port)

    async def __call__(self, markers: Markers) -> set[Partition]:
        services = self._services
        config = services.config
        topics = services.controller.topics()
        by_leader: dict[int, list[Partition]] = {}
        remaining: set[Partition] = set()
        for topic, index in markers.partitions:
            info = topics.get(topic)
            if info is None:
                continue  # deleted: nothing to mark
            leader = info.leader_of(index)
            if leader < 0:
                remaining.add((topic, index))
            else:
                by_leader.setdefault(leader, []).append((topic, index))

        async def send(leader: int, partitions: list[Partition]) -> None:
            request = _request(markers, partitions)
            try:
                if leader == config.broker_id:
                    response = await write_markers(services, request)
                else:
                    response = await self.request_broker(leader, request)
            except (ClientError, KafkaError, OSError) as exc:
                log.info("markers for producer %d to broker %d: %s; retrying", markers.producer_id, leader, exc)
                remaining.update(partitions)
                return
            remaining.update(_failed(response, markers))

        async with trio.open_nursery() as nursery:
            for leader, partitions in by_leader.items():
                nursery.start_soon(send, leader, partitions)
        return remaining
