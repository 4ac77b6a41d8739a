"""A short seeded fuzz run against a real broker process (`make fuzz` runs the long one).

Thirty thousand mutated frames of every API the broker serves, at every version (CreateTopics
and CreatePartitions with huge and negative counts among them, produces of real record batches
with their headers tampered with), over many pipelined connections. The broker must stay up,
answer ApiVersions throughout, decode-ably answer whatever it answers, give back every socket
and file once the connections are gone and the run's topics deleted, keep its RSS within a
bound, log no internal error, keep its log's growth within LOG_BYTES_PER_MINUTE (every line a
peer can cause is rate-limited: among the frames are thousands of forged LeaderAndIsr,
UpdateMetadata and StopReplica requests and topic configs that warn), serve a confluent-kafka
producer and consumer afterwards, and stop cleanly (the fixture checks that).
"""

from __future__ import annotations

from deploy.broker_process import BrokerProcess
from deploy.fuzz.run import FuzzOptions, run_fuzz

FRAMES = 30_000
# Bytes the broker's log may grow by per minute: the rate limits let through one line per kind
# and a bounded burst per call site; without them the same run writes megabytes.
LOG_BYTES_PER_MINUTE = 128 * 1024
SEED = 1  # fixed: a failure reproduces with `python -m deploy.fuzz --frames 30000 --seed 1`


def test_a_short_fuzz_run_leaves_the_broker_alive_bounded_and_serving(broker: BrokerProcess) -> None:
    assert broker.proc is not None
    result = run_fuzz(FuzzOptions(bootstrap=broker.bootstrap, frames=FRAMES, seed=SEED, pid=broker.proc.pid,
                                  log_path=broker.log_path, time_limit_s=300, rss_growth_limit_mib=256,
                                  log_bytes_per_minute_limit=LOG_BYTES_PER_MINUTE))
    detail = f"{result.summary()}\n{result.details()}\nbroker log:\n{broker.log_tail()}"
    assert result.passed, detail
    c = result.counters
    assert c.frames_sent == FRAMES, detail
    # The broker read the frames: it answered them, or closed the connection on the one that
    # did not parse (the frames pipelined behind that one are never read, as in Kafka).
    assert c.answered + c.closed_by_broker >= FRAMES * 0.6, detail
    assert c.answered > FRAMES // 3 and c.closed_by_broker > FRAMES // 20, detail
    assert c.sent_by_api[19] > 1000 and c.sent_by_api[37] > 1000, detail  # CreateTopics, CreatePartitions
    assert min(c.sent_by_api[k] for k in (4, 5, 6)) > 300, detail  # LeaderAndIsr, StopReplica, UpdateMetadata
    assert 0 < result.log_growth <= LOG_BYTES_PER_MINUTE * max(1.0, result.elapsed_s / 60), detail
    assert result.probes >= 2 and result.logged_errors == 0, detail
    assert broker.proc.poll() is None, detail
