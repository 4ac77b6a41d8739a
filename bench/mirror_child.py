"""`causeway mirror` for bench/mirror.py, with two measuring knobs the product does not have.

    python -m bench.mirror_child mirror --config FILE ...   # the same arguments as `causeway`

- BENCH_LINK_REQUEST_BYTES=N: link mode's LinkAppend request size (mirror/link.py's
  LINK_REQUEST_MAX_BYTES, read at each write) for this process, to see whether another size helps;
- BENCH_PROFILE=FILE: cProfile the mirror's thread, written to FILE when it stops (SIGTERM is the
  mirror's clean stop, so the profile is always written).

Without either it is `python -m deploy.cli` exactly.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    request_bytes = os.environ.get("BENCH_LINK_REQUEST_BYTES")
    if request_bytes:
        import mirror.link

        mirror.link.LINK_REQUEST_MAX_BYTES = int(request_bytes)
    from deploy.cli import main as causeway

    profile = os.environ.get("BENCH_PROFILE")
    if not profile:
        return causeway(sys.argv[1:])
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        return causeway(sys.argv[1:])
    finally:
        profiler.disable()
        profiler.dump_stats(profile)


if __name__ == "__main__":
    sys.exit(main())
