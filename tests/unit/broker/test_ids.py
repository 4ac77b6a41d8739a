"""Random ids as Kafka makes them: never text that a command line would read as an option."""

from __future__ import annotations

import uuid

from broker.ids import random_uuid, random_uuid_text, uuid_text


def test_no_random_id_starts_with_a_dash() -> None:
    # One uuid4 in 64 has text starting with "-": among 5,000 draws, about 78 would.
    texts = [random_uuid_text() for _ in range(5000)]
    assert not [t for t in texts if t.startswith("-")]
    assert all(len(t) == 22 and "=" not in t for t in texts)
    assert len(set(texts)) == len(texts)


def test_text_is_kafkas_uuid_to_string() -> None:
    # URL-safe base64 of the 16 bytes without padding: "-" and "_" where plain base64 has "+" "/".
    assert uuid_text(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert uuid_text(uuid.UUID("fbfffbff-fbff-fbff-fbff-fbfffbfffbff")) == "-__7__v_-__7__v_-__7_w"
    assert isinstance(random_uuid(), uuid.UUID)
