"""Whether a librdkafka client gets in: it asks for metadata, and comes back as soon as it has
them or librdkafka reported the refusal the caller waits for (through `error_cb`).

    attempt = ask_metadata({"bootstrap.servers": wan, "security.protocol": "SASL_SSL", ...},
                           until=(KafkaError._AUTHENTICATION,))
    assert not attempt.served and attempt.refused_by(KafkaError._AUTHENTICATION)

A refused client never gets its metadata, so one `list_topics(timeout=8)` always waited the whole
8 s although librdkafka reports a failed login or handshake within milliseconds. Here the
metadata request is asked again every `interval_s` up to the same deadline, and the error
callbacks are served between the asks, so the test learns of the refusal when librdkafka does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

__all__ = ["Attempt", "ask_metadata"]


@dataclass
class Attempt:
    errors: list[KafkaError] = field(default_factory=list)  # what librdkafka reported to error_cb
    failure: KafkaError | None = None  # why the last metadata request failed; None: they came back

    @property
    def served(self) -> bool:
        return self.failure is None

    def refused_by(self, *codes: int) -> bool:
        return any(e.code() in codes for e in self.errors)


def ask_metadata(config: Mapping[str, object], *, until: tuple[int, ...] = (), timeout_s: float = 8.0,
                 interval_s: float = 0.25, admin: bool = False) -> Attempt:
    """Ask for the cluster's metadata with `config` (a Producer's, or an AdminClient's with
    `admin`) until they come back, librdkafka reports an error with one of the codes `until`
    (any error when `until` is empty), or `timeout_s` passed."""
    errors: list[KafkaError] = []
    settings = {**config, "error_cb": errors.append}
    client: Producer | AdminClient = AdminClient(settings) if admin else Producer(settings)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.list_topics(timeout=max(0.01, min(interval_s, deadline - time.monotonic())))
        except KafkaException as exc:
            client.poll(0)  # serve the error callbacks
            seen = any(e.code() in until for e in errors) if until else bool(errors)
            if seen or time.monotonic() >= deadline:
                return Attempt(errors, exc.args[0])
            continue
        client.poll(0)
        return Attempt(errors)
