"""The DR failover drill with an Apache Kafka 4.x primary: the DR matrix's "source: Apache Kafka"
column (deploy/chaos/dr.py KAFKA_COLUMN), each disaster (planned, kill, partition) x mirror mode
(link, mm2). A KRaft node from bench/peers (tests/support/kafka_source.py) holds `orders` (3
partitions) and `payments` (2), a `causeway mirror` copies them into a Causeway DR cluster, and
deploy/drill/run.py runs the drill as `causeway drill failover --disaster D` does: idempotent
producers and a group at Kafka; the disaster (the producers stopped first; Kafka SIGKILLed; or
the WAN link the mirror reads Kafka through cut at the emulator, Kafka left running); `promote`
(`--failover` but for a planned one) at once, producers and the group moved to the DR site,
everything counted. `make test` runs kill x link; the rest are marked `chaos` and run in
`make chaos` (`pytest -m chaos`).

Checked: the verdict the DR matrix gives its Causeway column (deploy/chaos/dr.py problems_of:
nothing duplicated, a planned switch-over loses nothing, the group skips nothing and re-reads
exactly what its offsets at the DR site at the promotion account for, none below them, and after
a planned link switch-over nothing at all), and, on the copy, that the DR site holds the
acknowledged records it got in Kafka's order (in link mode at Kafka's own offsets) and lacks
only each partition's tail: the RPO. No failback: truncate-and-restore and reverse-and-start are
not possible at a Kafka old primary (docs/operations/mirror-link.md); the line printed per
scenario says so.
"""

from __future__ import annotations

import json
import re
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from deploy.broker_process import BrokerProcess
from deploy.chaos.dr import KAFKA_COLUMN, KAFKA_PROFILE, DrResult, DrScenario, problems_of
from deploy.child_process import ChildProcess
from deploy.drill.run import DrillPlan, run_drill
from deploy.drill.topics import dr_names, mirrored_topics, partitions_of
from deploy.drill.verify import read_logs
from deploy.wan.client import WanClient
from deploy.wan.process import WanProcess
from mirror.config import load_mirror_config
from tests.compat.partitions import TIMEOUT_S, create_topic
from tests.compat.test_mirror_kafka_peers import commit
from tests.support.kafka_source import WAN_PROXY, kafka_behind_wan, kafka_source, mirror_from_kafka
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat
REPO = Path(__file__).resolve().parents[2]
MIRROR = "kafka-to-dr"
TOPICS = {"orders": 3, "payments": 2}
# Kafka's group joins at once (as the DR site's): a 3 s delay would leave the drill's group at
# Kafka with nothing read, nothing committed, nothing to carry.
KAFKA_CONFIGS = {"group.initial.rebalance.delay.ms": "0"}
SCENARIOS = [pytest.param(s, id=f"{s.disaster}-{s.mode}", marks=() if s == KAFKA_PROFILE else pytest.mark.chaos)
             for s in KAFKA_COLUMN]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_failover_drill_from_an_apache_kafka_primary(scenario: DrScenario, tmp_path: Path, kafka_jars: None,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with ExitStack() as stack:
        if scenario.disaster == "partition":
            # The mirror reads Kafka across an emulated WAN link (Kafka's WAN listener, advertised
            # at the emulator's proxy) that the drill cuts; the primary's clients stay local.
            wan = stack.enter_context(WanProcess(log_path=tmp_path / "wan.log"))
            behind = stack.enter_context(kafka_behind_wan(tmp_path / "kafka", wan.api, KAFKA_CONFIGS))
            kafka, mirror_reads, wan_link = behind, behind.wan_bootstrap, (wan.api, (WAN_PROXY,))
            # Through the proxy, Kafka names the proxy: the mirror's every connection crosses the link.
            brokers = AdminClient({"bootstrap.servers": mirror_reads}).list_topics(timeout=TIMEOUT_S).brokers
            assert [f"{b.host}:{b.port}" for b in brokers.values()] == [mirror_reads]
        else:
            kafka = stack.enter_context(kafka_source(tmp_path / "kafka", KAFKA_CONFIGS))
            mirror_reads, wan_link = kafka.bootstrap, None
        for topic, partitions in TOPICS.items():
            create_topic(kafka.bootstrap, topic, partitions)
        # A fresh Kafka makes __consumer_offsets at its first group request, which can take the
        # drill's whole workload on a loaded machine: made first, as a running cluster has it
        # (by a group the mirror leaves alone, console-consumer-*).
        wait_until(lambda: commit(kafka.bootstrap, "console-consumer-warm-up", {("orders", 0): 0}),
                   what="Kafka's group coordinator", timeout_s=TIMEOUT_S)
        dr = BrokerProcess(tmp_path / "dr", overrides=("group.initial.rebalance.delay.ms=0",)).start()
        config_path = tmp_path / "mirror.yaml"
        config_path.write_text(json.dumps(mirror_from_kafka(kafka, "dr", dr.bootstrap, name=MIRROR, mode=scenario.mode,
                                                            bootstrap=mirror_reads,
                                                            **{"refresh.topics.interval.seconds": 0.5})))
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
            plan = DrillPlan(kind="failover", disaster=scenario.disaster,
                             state_dir=tmp_path, mirror=MIRROR, source="kafka", target="dr",
                             source_bootstrap=kafka.bootstrap, target_bootstrap=dr.bootstrap, topics=list(topics),
                             partitions=partitions_of(topics), config=config, rate=scenario.rate,
                             duration_s=scenario.duration_s, dr_topics=dr_names(config, list(topics)),
                             kill_source=kill_kafka, wan_link=wan_link)
            said: list[str] = []
            report = run_drill(plan, said.append)
            output = "\n".join([*said, report.table()])
            done = report.outcome
            assert done is not None and report.rto_produce_s is not None and report.rto_consume_s is not None, output
            disaster = report.timeline.steps[1]
            if scenario.disaster == "kill":
                assert killed and f"pids {killed[0]}" in disaster.detail, output
            elif scenario.disaster == "partition":
                assert not killed and WAN_PROXY in disaster.detail, output
                assert WanClient(wan.api).proxies()[WAN_PROXY]["enabled"] is True  # put back by the drill
            else:
                assert not killed and disaster.name == "producers stopped", output
            result = DrResult(scenario, tmp_path, report=report.to_json())
            result.problems = problems_of(scenario, result.report)
            with capsys.disabled():  # the matrix's line for this row, as deploy.chaos prints its own
                print(f"\n{result.describe()}")
            assert result.passed, output

            # The copy: each acknowledged record it got in Kafka's order (link mode: where Kafka
            # put it), the rest each partition's tail.
            assert done.acknowledged > 0 and done.reached == done.acknowledged - done.rpo, output
            copy = read_logs(dr.bootstrap, done.log_end)
            acknowledged = {n for acked in report.acked_primary.values() for n in acked.values()}
            for (topic, p), acked in report.acked_primary.items():
                at_dr = (plan.dr_name(topic), p)
                ours = sorted((o, n) for o, n in copy[at_dr].items() if n.startswith(f"{report.run}:primary:"))
                got = [n for _, n in ours if n in acknowledged]
                assert got == [acked[o] for o in sorted(acked)][:len(got)], (at_dr, got[:5])
                # A record Kafka wrote as it was killed, its acknowledgement never sent, is copied
                # too: it is none the producer was told of, and it comes after all it was told of.
                unacked = [i for i, (_, n) in enumerate(ours) if n not in acknowledged]
                assert all(i >= len(got) for i in unacked), (at_dr, unacked, len(got))
                if scenario.mode == "link":
                    end = done.log_end[at_dr]
                    assert {o: n for o, n in ours if n in acknowledged} == {o: n for o, n in acked.items() if o < end}
                    lost = sorted(o for o in acked if o >= end)
                    assert lost == list(range(end, end + len(lost))), (at_dr, end, lost[:5])

            # The group: it committed at Kafka, the mirror carried (link) or translated (mm2) its
            # offsets, and they are within the copy.
            assert set(done.committed) == set(plan.dr_partitions()), output
            assert all(done.committed[tp] <= done.log_end[tp] for tp in plan.dr_partitions()), output
            if scenario.mode == "link":
                assert all(done.committed[tp] >= 0 for tp in plan.dr_partitions()), output
                # Where it resumed at the DR site: exactly what the promotion said (the mirror
                # process's copies that land after it are refused there, LinkOffsetCommit on a
                # promoted topic).
                said_offsets = re.search(r"promote: +group causeway-drill-\w+: (?:last copied|offsets copied one "
                                         r"last time:) (.*)", output)
                assert said_offsets is not None, output
                resumed = {tp: int(o) for tp, o in (part.rsplit(" ", 1) for part in said_offsets[1].split(", "))}
                assert resumed == {f"{t}-{p}": o for (t, p), o in done.committed.items()}, output
        finally:
            assert mirror.stop(TIMEOUT_S) == 0, log.read_text(errors="replace")[-3000:]
            assert dr.stop() == 0, dr.log_tail()
    assert "Traceback" not in log.read_text(errors="replace")
