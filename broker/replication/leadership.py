"""How the group coordinator learns which `__consumer_offsets` partitions this broker leads.

The protocol lives here, beside the replica manager that calls it, so replication never imports
the coordinator built on top of it.

Kafka's GroupCoordinator follows the partition leaders of `__consumer_offsets` (onElection /
onResignation): a broker that becomes leader of a partition loads that partition's groups and
offsets, one that stops leading it unloads them. The replica manager tells its listeners each
time a hosted partition's role changes; the group coordinator is one. Standalone, the broker
leads every partition from the start and says so once for each.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["LeadershipListener"]


class LeadershipListener(Protocol):
    """Told of a partition's role changes on this broker; called on the broker's trio thread.

    Both methods return at once (no IO, no waiting): work they start runs in the listener's own
    tasks, so a LeaderAndIsr that moves many partitions is never held up by one listener.
    Topics the listener does not care about are ignored by it.
    """

    def on_became_leader(self, topic: str, partition: int, leader_epoch: int) -> None:
        """This broker leads ``topic``-``partition`` from ``leader_epoch`` on (also called again
        when it stays leader in a newer epoch)."""
        ...

    def on_resigned(self, topic: str, partition: int, leader_epoch: int | None) -> None:
        """This broker no longer leads the partition: it became a follower in ``leader_epoch``,
        or (None) the replica was stopped or deleted."""
        ...
