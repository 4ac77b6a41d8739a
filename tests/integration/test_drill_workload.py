"""The drill's consumer group (deploy/drill/workload.py GroupReader) against a real broker: a
commit the coordinator does not take is made again, so what the group read is what it has
committed once it stops (a moved group resumes there: a commit lost is a re-read the drill would
blame on the move)."""

from __future__ import annotations

import threading
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.broker_process import BrokerProcess
from deploy.drill.run import caught_up
from deploy.drill.verify import committed_offsets
from deploy.drill.workload import GroupReader, record_name
from tests.support.polling import wait_until

TOPIC, PARTITIONS, RUN = "drill-workload", 3, "drill-commits"


class CommitsRefused:
    """The reader's consumer, its commits refused (as a coordinator moving or overloaded refuses
    them) while `refusing` is set, and the first one after it is cleared too (the last commit, at
    the stop, is refused once)."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.refusing = threading.Event()
        self.refusing.set()
        self.refused = 0
        self._refuse_once_more = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        if self.refusing.is_set() or self._refuse_once_more:
            if not self.refusing.is_set():
                self._refuse_once_more = False
            self.refused += 1
            raise KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT))
        return self._consumer.commit(*args, **kwargs)


def test_a_reader_stopping_commits_what_it_read_though_its_commits_were_refused(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for seq in range(60):
        producer.produce(TOPIC, partition=seq % PARTITIONS, value=record_name(RUN, "home", seq).encode())
    assert producer.flush(30) == 0
    ends = {(TOPIC, p): 20 for p in range(PARTITIONS)}

    reader = GroupReader(broker.bootstrap, "drill-group", [TOPIC], RUN)
    refused = CommitsRefused(reader._consumer)
    reader._consumer = cast(Consumer, refused)
    reader.start()
    try:
        # Every record read and a commit of them refused (then another after the last read, or
        # none yet: either way the coordinator holds nothing of what was read).
        wait_until(lambda: caught_up(reader, ends) and refused.refused > 0,
                   what="the reader to read every record and a commit refused")
    finally:
        refused.refusing.clear()
        reader.stop(commit=True)
    assert committed_offsets(broker.bootstrap, "drill-group", list(ends)) == ends
    assert reader.last_commit_taken and reader.commits_refused == refused.refused >= 2
