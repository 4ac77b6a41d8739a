"""Run a real ``causeway broker`` process for a test: port 0, readiness from its stdout line.

The implementation lives in `deploy.broker_process`, shared with the benchmarks and tools; the
tests import it from here as before.
"""

from __future__ import annotations

from deploy.broker_process import READY, START_TIMEOUT_S, BrokerProcess, broker_command, fd_count, rss_bytes

__all__ = ["READY", "START_TIMEOUT_S", "BrokerProcess", "broker_command", "fd_count", "rss_bytes"]
