"""Kafka requests by hand over a plain blocking socket, for what real clients never send.

The implementation lives in `deploy.kafka_socket`, shared with the fuzzer and other tools; tests
import it from here. A connection the broker closes before answering raises ConnectionError
(`read_frame_or_none` and `exchange` answer None instead); a socket with a timeout waits even on
`recv(..., MSG_DONTWAIT)`, so a test that peeks without blocking connects with `timeout_s=None`.
"""

from __future__ import annotations

from deploy.kafka_socket import (
    ask,
    call,
    connect,
    decode_response,
    exchange,
    message_frame,
    read_frame,
    read_frame_or_none,
    request_frame,
)

__all__ = ["ask", "call", "connect", "decode_response", "exchange", "message_frame", "read_frame", "read_frame_or_none",
           "request_frame"]
