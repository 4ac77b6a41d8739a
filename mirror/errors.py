"""The mirror's own fatal error, apart so `causeway mirror` can map it without importing the daemon."""

from __future__ import annotations

__all__ = ["MirrorRefused"]


class MirrorRefused(Exception):
    """The mirror cannot run as configured (a link-mode mirror whose target is not Causeway):
    retrying cannot help, so `run_mirror` reports it in the status and raises it."""
