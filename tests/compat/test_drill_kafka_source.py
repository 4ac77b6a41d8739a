"""The DR failover drill with an Apache Kafka 4.x primary (the DR matrix's "source: Apache Kafka"
column, its failover scenario): a KRaft node from bench/peers (tests/support/kafka_source.py)
holds `orders` (3 partitions) and `payments` (2), a link-mode `causeway mirror` copies them into
a Causeway DR cluster, and deploy/drill/run.py runs the drill as `causeway drill failover
--disaster kill` does: idempotent producers and a group at Kafka, Kafka SIGKILLed, `promote
--failover` at once, producers and the group moved to the DR site, everything counted.

Checked: the DR site holds each acknowledged record it got at Kafka's own offset and what it
lacks is each partition's tail past its end at the promotion (the RPO; no truncate-and-restore
is possible at a Kafka old primary, docs/operations/mirror-link.md); nothing duplicated; the
group's offsets carried from Kafka are where it resumed at the DR site: it re-read exactly what
it had read at Kafka past them, none below, and skipped nothing.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from deploy.broker_process import BrokerProcess
from deploy.child_process import ChildProcess
from deploy.drill.run import DrillPlan, run_drill
from deploy.drill.topics import dr_names, mirrored_topics, partitions_of
from deploy.drill.verify import read_logs
from mirror.config import load_mirror_config
from tests.compat.partitions import TIMEOUT_S, create_topic
from tests.compat.test_mirror_kafka_peers import commit
from tests.support.kafka_source import kafka_source, mirror_from_kafka
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat
REPO = Path(__file__).resolve().parents[2]
MIRROR = "kafka-to-dr"
TOPICS = {"orders": 3, "payments": 2}


def test_a_failover_drill_from_an_apache_kafka_primary(tmp_path: Path, kafka_jars: None) -> None:
    # Kafka's group joins at once (as the DR site's): a 3 s delay would leave the drill's group
    # at Kafka with nothing read, nothing committed, nothing to carry.
    with kafka_source(tmp_path / "kafka", {"group.initial.rebalance.delay.ms": "0"}) as kafka:
        for topic, partitions in TOPICS.items():
            create_topic(kafka.bootstrap, topic, partitions)
        # A fresh Kafka makes __consumer_offsets at its first group request, which can take the
        # drill's whole workload on a loaded machine: made first, as a running cluster has it
        # (by a group the mirror leaves alone, console-consumer-*).
        wait_until(lambda: commit(kafka.bootstrap, "console-consumer-warm-up", {("orders", 0): 0}),
                   what="Kafka's group coordinator", timeout_s=TIMEOUT_S)
        dr = BrokerProcess(tmp_path / "dr", overrides=("group.initial.rebalance.delay.ms=0",)).start()
        config_path = tmp_path / "mirror.yaml"
        config_path.write_text(json.dumps(mirror_from_kafka(kafka, "dr", dr.bootstrap, name=MIRROR, **{
            "refresh.topics.interval.seconds": 0.5})))
        log = tmp_path / "mirror.log"
        mirror = ChildProcess.start("causeway mirror", [sys.executable, "-m", "deploy.cli", "mirror", "--config",
                                                        str(config_path)], log_path=log, stdout="discard", cwd=REPO)
        killed: list[int] = []

        def kill_kafka() -> list[int]:
            assert kafka.proc is not None
            killed.append(kafka.proc.pid)
            kafka.kill()
            return list(killed)

        try:
            config = load_mirror_config(config_path)
            topics = mirrored_topics(kafka.bootstrap, dr.bootstrap, config, MIRROR, timeout_s=TIMEOUT_S)
            assert topics == TOPICS
            plan = DrillPlan(kind="failover", disaster="kill", state_dir=tmp_path, mirror=MIRROR, source="kafka",
                             target="dr", source_bootstrap=kafka.bootstrap, target_bootstrap=dr.bootstrap,
                             topics=list(topics), partitions=partitions_of(topics), config=config, rate=300,
                             duration_s=3, dr_topics=dr_names(config, list(topics)), kill_source=kill_kafka)
            said: list[str] = []
            report = run_drill(plan, said.append)
            output = "\n".join([*said, report.table()])
            done = report.outcome
            assert done is not None and killed, output
            assert f"pids {killed[0]}" in report.timeline.steps[1].detail, output
            assert report.rto_produce_s is not None and report.rto_consume_s is not None, output

            # The copy: Kafka's offsets kept, each acknowledged record it got where Kafka put it,
            # the rest each partition's tail past the DR site's end at the promotion.
            assert done.acknowledged > 0 and done.duplicates == 0, output
            assert done.reached == done.acknowledged - done.rpo, output
            copy = read_logs(dr.bootstrap, done.log_end)
            acknowledged = {n for acked in report.acked_primary.values() for n in acked.values()}
            for tp, acked in report.acked_primary.items():
                end = done.log_end[tp]
                ours = {o: n for o, n in copy[tp].items() if n.startswith(f"{report.run}:primary:")}
                assert {o: n for o, n in acked.items() if o < end} == {
                    o: n for o, n in ours.items() if n in acknowledged}, tp
                # A record Kafka wrote as it was killed, its acknowledgement never sent, is copied
                # too: it is none the producer was told of, and it comes after all it was told of.
                unacked = sorted(o for o, n in ours.items() if n not in acknowledged)
                assert all(o > max(acked, default=-1) for o in unacked), (tp, unacked, max(acked, default=-1))
                lost = sorted(o for o in acked if o >= end)
                assert lost == list(range(end, end + len(lost))), (tp, end, lost[:5])
            assert sum(x.count for x in done.lost) == done.rpo, output

            # The group: it committed at Kafka, the mirror carried its offsets, and they are where
            # it resumed at the DR site: exactly what the promotion said (the mirror process's
            # copies that land after it are refused there, LinkOffsetCommit on a promoted topic).
            assert set(done.committed) == set(plan.partitions), output
            assert all(0 <= done.committed[tp] <= done.log_end[tp] for tp in plan.partitions), output
            said_offsets = re.search(r"promote: +group causeway-drill-\w+: (?:last copied|offsets copied one last "
                                     r"time:) (.*)", output)
            assert said_offsets is not None, output
            resumed = {tp: int(o) for tp, o in (part.rsplit(" ", 1) for part in said_offsets[1].split(", "))}
            assert resumed == {f"{t}-{p}": o for (t, p), o in done.committed.items()}, output
            assert done.reread_below_committed == 0 and done.reread == done.reread_expected, output
            assert done.skipped == 0, output
        finally:
            assert mirror.stop(TIMEOUT_S) == 0, log.read_text(errors="replace")[-3000:]
            assert dr.stop() == 0, dr.log_tail()
    assert "Traceback" not in log.read_text(errors="replace")
