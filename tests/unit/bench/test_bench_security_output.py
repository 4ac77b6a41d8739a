"""bench.security's table: each rate beside its change from the same broker's PLAINTEXT rate and
its ratio to Kafka's, the best of the rounds, a missing rate shown as missing; and the client keys
the perf tools get for each listener."""

from __future__ import annotations

from pathlib import Path

from bench.security import CAUSEWAY, KAFKA, QUICK, Certs, Rate, Results, client_config, markdown


def results() -> Results:
    made = Results(QUICK, "4.3.1", started="2026-11-27 20:00 UTC", load=[1.0, 2.0])
    made.tcp_mb_s.append(4000.0)
    made.tls_mb_s.append(800.0)
    made.rates[KAFKA] = {("produce", "PLAINTEXT"): [Rate(100_000, 97.7)], ("produce", "SSL"): [Rate(75_000, 73.2)],
                         ("consume", "PLAINTEXT"): [Rate(200_000, 195.3)]}
    made.rates[CAUSEWAY] = {("produce", "PLAINTEXT"): [Rate(40_000, 39.1), Rate(80_000, 78.1)],
                            ("produce", "SSL"): [Rate(60_000, 58.6)]}
    return made


def test_each_rate_is_beside_its_change_from_plaintext_and_its_ratio_to_kafka() -> None:
    table = markdown(results(), "python -m bench.security --quick")
    lines = table.splitlines()
    assert lines[0] == "## Security: what TLS and SASL_SSL cost (2026-11-27)"
    # Causeway's PLAINTEXT rate is the better of its two rounds.
    assert "| produce 1,024 B | PLAINTEXT | 100,000 | 97.7 | +0% | 80,000 | 78.1 | +0% | 0.80 |" in lines
    assert "| produce 1,024 B | SSL | 75,000 | 73.2 | -25% | 60,000 | 58.6 | -25% | 0.80 |" in lines
    assert "| produce 1,024 B | SASL_SSL | - | - | - | - | - | - | n/a |" in lines
    assert "| consume 1,024 B | PLAINTEXT | 200,000 | 195.3 | +0% | - | - | - | n/a |" in lines
    assert "loopback TCP 4,000 MB/s" in table and "800 MB/s" in table
    assert "Load average (1 min) during the run: 1.0 to 2.0" in table


def test_the_perf_tools_get_the_listeners_client_keys(tmp_path: Path) -> None:
    certs = Certs(tmp_path / "ca.crt", tmp_path / "broker.p12", "pw", tmp_path / "broker.crt", tmp_path / "broker.key")
    assert client_config(tmp_path, certs, "PLAINTEXT") is None
    ssl = client_config(tmp_path, certs, "SSL")
    assert ssl is not None
    assert ssl.read_text().splitlines() == ["security.protocol=SSL", "ssl.truststore.type=PEM",
                                            f"ssl.truststore.location={tmp_path / 'ca.crt'}"]
    sasl = client_config(tmp_path, certs, "SASL_SSL")
    assert sasl is not None
    keys = dict(line.split("=", 1) for line in sasl.read_text().splitlines())
    assert keys["security.protocol"] == "SASL_SSL" and keys["sasl.mechanism"] == "PLAIN"
    assert keys["sasl.jaas.config"] == ('org.apache.kafka.common.security.plain.PlainLoginModule required'
                                        ' username="bench" password="bench-secret";')
