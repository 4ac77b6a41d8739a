"""`python -m bench.security --quick` runs end to end: Apache Kafka (the cached 4.x peer) and a
Causeway broker are started with PLAINTEXT, SSL and SASL_SSL listeners on the same certificate,
and Kafka's perf tools produce and consume over each. It checks that every case on every listener
of both brokers yields a positive rate, never how large: the machine is shared."""

from __future__ import annotations

import pytest

from bench import security

pytestmark = pytest.mark.slow


def test_quick_profile_measures_every_listener_of_both_brokers(kafka_jars: None) -> None:
    said: list[str] = []
    results = security.run(security.QUICK, say=said.append)

    for broker in (security.KAFKA, security.CAUSEWAY):
        for case in ("produce", "consume"):
            for protocol in security.PROTOCOLS:
                rates = results.rates[broker].get((case, protocol))
                assert rates, f"no {case} over {protocol} on {broker}: {said}"
                assert all(r.records_per_s > 0 and r.mib_per_s > 0 for r in rates), f"{broker} {case} {protocol}"
    assert results.tcp_mb_s[0] > 0 and results.tls_mb_s[0] > 0

    table = security.markdown(results, "python -m bench.security --quick")
    assert sum(line.startswith(("| produce 1,024 B |", "| consume 1,024 B |")) for line in table.splitlines()) == 6
    assert "| - | - |" not in table
