"""The write-retry loop both writers share: mm2 mode's Produce (mirror/partition.py) and link
mode's LinkAppend (mirror/link.py).

A writer sends one piece (a batch, a run of batches) until the target takes it. What each
writer does with the target's answers is its own (a new producer id, a poison batch parked, a
copy that is not the source's FAILED); what is left is the same for both, and lives here:

- the loop runs while the partition is neither stopped nor rewound (its `epoch` moved on);
- a retriable error is retried with backoff, logged now and then;
- any other error parks the partition, which tries again slowly (PARK_BACKOFF) in case the
  target's settings change, and says at which source offset in the status.

    written = await write_with_retries(pm, epoch, send, backoff=RETRY, at_offset=first_offset)

`send` makes one attempt and returns what was written (the loop returns it), or `Failed(code)`
after setting the partition's `error`, or a `Handled` verdict when it dealt with the answer.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import trio

from broker.client import Backoff, TopicPartition
from broker.protocol.errors import ErrorCode, is_retriable
from broker.retry import worth_reporting

__all__ = ["PARK_BACKOFF", "Failed", "Handled", "WrittenPartition", "write_with_retries"]

log = logging.getLogger(__name__)

#: How a parked partition tries again: slowly, since what parked it rarely clears by itself.
PARK_BACKOFF = Backoff(initial_s=1.0, max_s=30.0)

T = TypeVar("T")


class WrittenPartition(Protocol):
    """What the loop reads and sets of the partition it writes (mirror/partition.py's
    PartitionMirror and its link-mode kind)."""

    source: TopicPartition
    stopped: bool
    epoch: int
    error: str | None
    parked: bool


@dataclass(frozen=True, slots=True)
class Failed:
    """The target refused the attempt with `code`, and the writer left it to the loop (having set
    the partition's `error` to say so)."""

    code: ErrorCode


class Handled(enum.Enum):
    """The writer dealt with the target's answer itself."""

    SEND_AGAIN = "send again"  # e.g. took a new producer id: send again at once (a failure counted)
    GIVE_UP = "give up"  # parked on poison, FAILED, stopped or rewound: the piece is not written


async def write_with_retries(pm: WrittenPartition, epoch: int, send: Callable[[], Awaitable[T | Failed | Handled]],
                             *, backoff: Backoff, at_offset: int,
                             sleep: Callable[[float], Awaitable[None]] = trio.sleep) -> T | None:
    """Call `send` until it returns what was written (returned here), or until the partition is
    stopped or rewound past `epoch`, or `send` gives up (None then). `at_offset`: the first source
    offset of what is sent, which a parked partition's status names. `sleep`: how the writer
    waits before trying again (mm2's exactly-once writer leaves its transaction meanwhile).
    Cancellation passes through."""
    failures = 0
    while not pm.stopped and pm.epoch == epoch:
        outcome = await send()
        if outcome is Handled.GIVE_UP:
            return None
        if not isinstance(outcome, (Failed, Handled)):
            return outcome
        failures += 1
        if not isinstance(outcome, Failed):
            continue  # SEND_AGAIN
        if is_retriable(outcome.code):
            if worth_reporting(failures, first=3):
                log.warning("%s: %s (attempt %d); retrying", _name(pm.source), pm.error, failures)
            await sleep(backoff.delay(failures))
            continue
        # Not retriable as it is (too large for the target, refused by an ACL, a refusal this
        # mirror does not know, ...): park the partition and try again slowly.
        pm.error = f"parked at source offset {at_offset}: {pm.error}"
        if not pm.parked:
            log.error("%s: %s", _name(pm.source), pm.error)
        pm.parked = True
        await sleep(PARK_BACKOFF.delay(failures))
    return None


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
