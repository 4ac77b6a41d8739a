"""What TLS and SASL_SSL cost: produce and consume over PLAINTEXT, SSL and SASL_SSL, on Apache Kafka
and on Causeway configured the same way, in one run.

    python -m bench.security            # 2 rounds of 300,000 records of 1 KiB per case (a few minutes)
    python -m bench.security --quick    # a smoke run (one round, small counts)
    python -m bench.security --rounds 3

One broker per side, each with three listeners: PLAINTEXT, SSL (server-only TLS) and SASL_SSL
(SASL/PLAIN over TLS). Both read the same PKCS12 keystore, made by the code behind `causeway certs
create` (security.certs), and the same PLAIN user from the same JAAS line; inter-broker traffic
(Kafka's only) stays on PLAINTEXT. Kafka's kafka-producer-perf-test and kafka-consumer-perf-test
run against each listener with the same record size, count and producer settings as
bench.side_by_side, the secured ones with a --command-config holding the client's keys. PLAIN
rather than SCRAM: Causeway keeps SCRAM credentials in ZooKeeper only, and a mechanism costs one
exchange per connection, not per byte, so it does not move a throughput figure.

Each round starts a fresh Kafka KRaft node and a fresh Causeway broker, one after the other, in
alternating order (the machine is shared); within a broker the listeners are measured in an order
rotated each round, after an untimed plaintext warm-up. Each figure is the best of the rounds;
every value is printed as it comes. The machine's ceilings are measured in the same run: loopback
TCP and loopback TLS (bench.ceiling: one Python thread to another, the TLS one through OpenSSL
with the brokers' certificate), the price of encryption alone on these cores. The end is a Markdown section
for BENCHMARKS.md.
"""

from __future__ import annotations

import os
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench import ceiling, clients, perf_tools
from bench.peers import KafkaBroker, peer
from bench.side_by_side import (
    CAUSEWAY,
    CAUSEWAY_OVERRIDES,
    KAFKA,
    PRODUCER_PROPERTIES,
    announce_run,
    how_run,
    profile_from_command_line,
)
from deploy.broker_process import BrokerProcess
from security.certs import Identity, create_certificates

__all__ = ["FULL", "PROTOCOLS", "QUICK", "Certs", "Profile", "Results", "main", "markdown", "run"]

PROTOCOLS: tuple[str, ...] = ("PLAINTEXT", "SSL", "SASL_SSL")
CASES: tuple[str, ...] = ("produce", "consume")
USER, PASSWORD = "bench", "bench-secret"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule required"


@dataclass(frozen=True)
class Profile:
    rounds: int
    size: int  # bytes per record
    records: int  # per case: produced over a listener, then consumed over the same listener
    warmup_records: int  # produced and consumed over PLAINTEXT, untimed, before each broker's cases
    ceiling_bytes: int


FULL = Profile(rounds=2, size=1024, records=300_000, warmup_records=200_000, ceiling_bytes=1 << 30)
QUICK = Profile(rounds=1, size=1024, records=2_000, warmup_records=0, ceiling_bytes=32 << 20)


@dataclass(frozen=True)
class Certs:
    """The broker identity both brokers serve and the CA their clients trust."""

    ca: Path
    keystore: Path  # PKCS12, what both brokers read
    password: str
    certificate: Path  # the same identity's PEM chain and key, for the TLS ceiling
    key: Path


@dataclass(frozen=True)
class Rate:
    records_per_s: float
    mib_per_s: float  # as Kafka's tools print it: 2**20 bytes


@dataclass
class Results:
    profile: Profile
    kafka_version: str
    # broker -> (case, protocol) -> one Rate per round
    rates: dict[str, dict[tuple[str, str], list[Rate]]] = field(default_factory=lambda: {KAFKA: {}, CAUSEWAY: {}})
    tcp_mb_s: list[float] = field(default_factory=list)
    tls_mb_s: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    started: str = ""
    seconds: float = 0.0

    def best(self, broker: str, case: str, protocol: str) -> Rate | None:
        found = self.rates[broker].get((case, protocol))
        return max(found, key=lambda rate: rate.records_per_s) if found else None


def make_certs(directory: Path) -> Certs:
    """A CA and a broker certificate for 127.0.0.1 and localhost, as `causeway certs create` makes them."""
    _, issued = create_certificates(directory, [Identity("broker", "broker", ("localhost", "127.0.0.1"))])
    broker = issued[0]
    password = broker.keystore_p12.with_name(broker.keystore_p12.name + ".password").read_text().strip()
    return Certs(directory / "ca.crt", broker.keystore_p12, password, broker.certificate, broker.key)


def broker_security(certs: Certs) -> dict[str, str]:
    """The keys both brokers get besides their listeners: Kafka's names, the same files and user."""
    return {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(certs.keystore),
        "ssl.keystore.password": certs.password,
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": f'{PLAIN_MODULE} user_{USER}="{PASSWORD}";',
    }


def client_config(directory: Path, certs: Certs, protocol: str) -> Path | None:
    """The --command-config of the perf tools for a listener (None for PLAINTEXT)."""
    if protocol == "PLAINTEXT":
        return None
    keys = {"security.protocol": protocol, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}
    if protocol == "SASL_SSL":
        keys |= {"sasl.mechanism": "PLAIN",
                 "sasl.jaas.config": f'{PLAIN_MODULE} username="{USER}" password="{PASSWORD}";'}
    path = directory / f"client-{protocol.lower()}.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in keys.items()))
    return path


@contextmanager
def start_kafka(directory: Path, certs: Certs) -> Iterator[dict[str, str]]:
    """A fresh KRaft node; yields its listeners, protocol -> HOST:PORT."""
    broker = KafkaBroker(directory, overrides=broker_security(certs), extra_listeners=PROTOCOLS[1:]).start()
    try:
        yield {protocol: broker.address(protocol) for protocol in PROTOCOLS}
    finally:
        broker.stop()


@contextmanager
def start_causeway(directory: Path, certs: Certs) -> Iterator[dict[str, str]]:
    """A fresh `causeway broker`; yields its listeners, protocol -> HOST:PORT."""
    listeners = ",".join(f"{protocol}://127.0.0.1:0" for protocol in PROTOCOLS)
    overrides = (f"listeners={listeners}", *CAUSEWAY_OVERRIDES,
                 *(f"{key}={value}" for key, value in broker_security(certs).items()))
    broker = BrokerProcess(directory / "data", overrides=overrides, log_level="warning").start()
    try:
        yield dict(broker.listeners)
    finally:
        broker.stop()


def tls_ceiling_mb_s(certs: Certs, total_bytes: int) -> float:
    """bench.ceiling's loopback TLS with the brokers' certificate, trusted through the same CA."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs.certificate, certs.key)
    return ceiling.loopback_tls_mb_s(server, ssl.create_default_context(cafile=str(certs.ca)), total_bytes)


def measure(broker: str, directory: Path, certs: Certs, protocols: tuple[str, ...], profile: Profile,
            results: Results, say: Callable[[str], None]) -> None:
    """Every case over every listener of one fresh broker, each rate recorded as it comes."""
    starter = start_kafka if broker == KAFKA else start_causeway
    results.load.append(os.getloadavg()[0])
    producer = ("acks=1", *PRODUCER_PROPERTIES)
    with starter(directory / "broker", certs) as listeners:
        plaintext = listeners["PLAINTEXT"]
        if profile.warmup_records:  # the JVM compiles its hot paths during the first run: leave it untimed
            clients.create_topic(plaintext, "warmup")
            perf_tools.producer_perf(plaintext, "warmup", profile.warmup_records, profile.size, producer)
            perf_tools.consumer_perf(plaintext, "warmup", profile.warmup_records, "warmup")
        for protocol in protocols:
            config = client_config(directory, certs, protocol)
            topic = f"security-{protocol.lower().replace('_', '-')}"
            clients.create_topic(plaintext, topic)  # topics are made over PLAINTEXT: only the data is timed
            p = perf_tools.producer_perf(listeners[protocol], topic, profile.records, profile.size, producer,
                                         command_config=config)
            c = perf_tools.consumer_perf(listeners[protocol], topic, profile.records, f"{topic}-reader",
                                         command_config=config)
            # The consumer's rate after its group join: the join is a few round trips, not bytes.
            for case, rate in (("produce", Rate(p.records_per_s, p.mib_per_s)),
                               ("consume", Rate(c.fetch_records_per_s, c.fetch_mib_per_s))):
                results.rates[broker].setdefault((case, protocol), []).append(rate)
                say(f"  {broker}: {case} over {protocol}: {rate.records_per_s:,.0f} records/s, "
                    f"{rate.mib_per_s:,.1f} MB/s")
    results.load.append(os.getloadavg()[0])


def run(profile: Profile, *, say: Callable[[str], None] = print) -> Results:
    results = Results(profile, peer("kafka4").version, started=announce_run(say))
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-security-", dir=os.environ.get("BENCH_DIR")) as tmp:
        certs = make_certs(Path(tmp) / "certs")
        for round_no in range(profile.rounds):
            order = (KAFKA, CAUSEWAY) if round_no % 2 == 0 else (CAUSEWAY, KAFKA)
            shift = round_no % len(PROTOCOLS)
            protocols = PROTOCOLS[shift:] + PROTOCOLS[:shift]
            results.tcp_mb_s.append(ceiling.loopback_tcp_mb_s(profile.ceiling_bytes))
            results.tls_mb_s.append(tls_ceiling_mb_s(certs, profile.ceiling_bytes))
            say(f"round {round_no + 1} of {profile.rounds} ({' then '.join(order)}; {', '.join(protocols)}): "
                f"ceilings loopback TCP {results.tcp_mb_s[-1]:,.0f} MB/s, TLS {results.tls_mb_s[-1]:,.0f} MB/s")
            for broker in order:
                directory = Path(tmp) / f"round-{round_no}-{broker}"
                directory.mkdir()
                measure(broker, directory, certs, protocols, profile, results, say)
    results.seconds = time.monotonic() - began
    return results


def _cost(rate: Rate | None, plain: Rate | None) -> str:
    """The rate's change from the same broker's over PLAINTEXT: -25% is a quarter slower."""
    if rate is None or plain is None or not plain.records_per_s:
        return "-"
    return f"{rate.records_per_s / plain.records_per_s - 1:+.0%}"


def _rate(rate: Rate | None) -> str:
    return f"{rate.records_per_s:,.0f} | {rate.mib_per_s:,.1f}" if rate is not None else "- | -"


def markdown(results: Results, command: str) -> str:
    """The BENCHMARKS.md section: how it was run, the machine's state, the table."""
    p = results.profile
    lines = [
        f"## Security: what TLS and SASL_SSL cost ({results.started[:10]})",
        "",
        how_run(command, results.started, results.seconds, results.load,
                "both brokers and every client on the same cores")
        + " Ceilings in the same run, one per round: loopback TCP"
        f" {', '.join(f'{x:,.0f}' for x in results.tcp_mb_s)} MB/s,"
        f" loopback TLS (one Python thread to another through OpenSSL, the same certificate)"
        f" {', '.join(f'{x:,.0f}' for x in results.tls_mb_s)} MB/s.",
        "",
        f"Apache Kafka {results.kafka_version} (one KRaft node) and Causeway (`causeway broker`), each with a"
        " PLAINTEXT, an SSL (server-only TLS) and a SASL_SSL (SASL/PLAIN) listener, the same PKCS12 keystore"
        " (ECDSA P-256, from `causeway certs create`'s code) and the same PLAIN user. Kafka's"
        f" kafka-producer-perf-test ({p.records:,} records of {p.size:,} B, `acks=1 {' '.join(PRODUCER_PROPERTIES)}`)"
        " then kafka-consumer-perf-test reading them back (the rate after its group join), over each listener,"
        f" the client's keys in `--command-config`. {p.rounds} round(s), brokers in alternating order and"
        " listeners in rotated order, best of the rounds; MB/s as the tools print them (2^20 bytes). \"vs"
        " PLAINTEXT\" is the change from the same broker's rate over PLAINTEXT (-25%: a quarter slower).",
        "",
        "| case | listener | Kafka records/s | Kafka MB/s | Kafka vs PLAINTEXT | Causeway records/s | Causeway MB/s"
        " | Causeway vs PLAINTEXT | Causeway / Kafka |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for case in CASES:
        kafka_plain, causeway_plain = results.best(KAFKA, case, "PLAINTEXT"), results.best(CAUSEWAY, case, "PLAINTEXT")
        for protocol in PROTOCOLS:
            k, c = results.best(KAFKA, case, protocol), results.best(CAUSEWAY, case, protocol)
            ratio = f"{c.records_per_s / k.records_per_s:.2f}" if k and c and k.records_per_s else "n/a"
            lines.append(f"| {case} {p.size:,} B | {protocol} | {_rate(k)} | {_cost(k, kafka_plain)} | {_rate(c)} |"
                         f" {_cost(c, causeway_plain)} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    profile, command = profile_from_command_line("bench.security", __doc__, FULL, QUICK, argv)
    results = run(profile, say=lambda line: print(line, flush=True))
    print("\n" + markdown(results, command), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
