"""Partition logs in Kafka's on-disk layout: segments, indexes, checkpoints, recovery, retention."""

from broker.storage.config import LogConfig
from broker.storage.log import AppendResult, Log, ReadResult
from broker.storage.manager import LogManager

__all__ = ["AppendResult", "Log", "LogConfig", "LogManager", "ReadResult"]
