"""When a mirror's status says the source is unreachable (`problems["source"]`, its topics
SOURCE_UNAVAILABLE, `causeway status` unhealthy): only when no fetch lane reaches it. A source
cluster whose one broker died (a partition leader, until another is elected) fails the lane that
holds only that broker's partitions while the other lanes copy: the cluster answers, and the
dead leader's partitions show their own fetch errors."""

from __future__ import annotations

from typing import Any

from broker.client import TopicPartition
from mirror.config import MirrorConfig
from mirror.link import LinkMirror, LinkPartition

REFUSED = "connection to 127.0.0.1:9 refused"


def mirror(lanes: int) -> LinkMirror:
    config = MirrorConfig.model_validate({
        "name": "kafka-to-dr", "mode": "link", "source": {"alias": "kafka", "bootstrap": "127.0.0.1:1"},
        "target": {"alias": "dr", "bootstrap": "127.0.0.1:2"}})
    unused: Any = None  # report() asks no cluster
    made = LinkMirror(config, unused, unused, None, [unused] * lanes)
    for p in range(3):
        tp = TopicPartition("orders", p)
        made.add_partition(LinkPartition(tp, tp, 0, 1000, 1 << 20))
    made.topics["orders"] = "orders"
    return made


def test_one_lane_failing_while_the_others_copy_is_not_an_unreachable_source() -> None:
    running = mirror(lanes=4)  # one partition a lane; the fourth lane fetches nothing
    running.lanes[0].last_error = REFUSED
    report = running.report()
    assert "source" not in report.problems and report.source_reached_ms is not None
    assert report.topic_states["orders"].state == "ACTIVE"


def test_every_fetching_lane_failing_is_an_unreachable_source() -> None:
    for lanes in (1, 4):
        running = mirror(lanes)
        for lane in running.lanes[:3]:
            lane.last_error = REFUSED
        report = running.report()
        assert report.problems["source"] == REFUSED and report.source_reached_ms is None
        assert report.topic_states["orders"].state == "SOURCE_UNAVAILABLE"
