"""bench.transactions's table: for each setup and transaction size, transactions/s and records/s
beside the idempotent producer's rounds/s and records/s and their ratio, the best of the rounds;
a missing figure shown as missing, a setup not run said so."""

from __future__ import annotations

from bench.transactions import CLUSTER, IDEMPOTENT, KAFKA, QUICK, STANDALONE, TRANSACTIONAL, Rate, Results, markdown


def results() -> Results:
    made = Results(QUICK, "4.3.1", started="2026-11-28 04:00 UTC", load=[1.5, 3.0], round_trip_us=[13.0])
    made.rates[STANDALONE] = {(TRANSACTIONAL, 1): [Rate(300.0, 300.0), Rate(400.0, 400.0)],
                              (IDEMPOTENT, 1): [Rate(3000.0, 3000.0)],
                              (TRANSACTIONAL, 100): [Rate(50.0, 5000.0)]}
    made.rates[CLUSTER] = {(IDEMPOTENT, 100): [Rate(20.0, 2000.0)]}
    made.missing[KAFKA] = "not run"
    return made


def test_each_transactional_rate_is_beside_the_idempotent_one_and_their_ratio() -> None:
    table = markdown(results(), "python -m bench.transactions --quick")
    lines = table.splitlines()
    assert lines[0] == "## Transactions: transactional produce beside idempotent (2026-11-28)"
    # The standalone transactional rate is the better of its two rounds.
    assert "| causeway standalone | 1 | 400.0 | 400 | 3,000.0 | 3,000 | 0.13 |" in lines
    assert "| causeway standalone | 100 | 50.0 | 5,000 | - | - | n/a |" in lines
    assert "| causeway 3 brokers (ZooKeeper) | 100 | - | - | 20.0 | 2,000 | n/a |" in lines
    assert "| kafka (1 KRaft node) | - | - | - | - | - | not run |" in lines
    assert "Load average (1 min) during the run: 1.5 to 3.0" in table and "p50 13 µs" in table
