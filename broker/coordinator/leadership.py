"""The coordinator's side of leadership changes: see broker/replication/leadership.py."""

from broker.replication.leadership import LeadershipListener

__all__ = ["LeadershipListener"]
