"""The Kafka peers from the command line.

    python -m bench.peers fetch [PROFILE...]      # what `make peers` runs; quiet when cached
    python -m bench.peers classpath [PROFILE]     # the jars, ':'-joined, for java -cp
    python -m bench.peers tool NAME ARGS...       # e.g. tool kafka-topics --bootstrap-server H:P --list
    python -m bench.peers kafka [DIR]             # an Apache Kafka 4.x KRaft broker until Ctrl-C
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# Only the standard-library modules here: `make peers` runs before anything else is needed.
from bench.peers import cache


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="resolve the peers' jars with Maven into the cache")
    fetch.add_argument("profiles", nargs="*", help="pom profiles (default: all)")
    classpath = sub.add_parser("classpath", help="print a peer's classpath")
    classpath.add_argument("profile", nargs="?", default="kafka4")
    tool = sub.add_parser("tool", help="run a Kafka command-line tool by name or main class")
    tool.add_argument("--profile", default="kafka4")
    tool.add_argument("name")
    tool.add_argument("args", nargs=argparse.REMAINDER)
    kafka = sub.add_parser("kafka", help="run an Apache Kafka KRaft broker until Ctrl-C")
    kafka.add_argument("directory", nargs="?", type=Path)
    args = parser.parse_args(argv)

    if args.command == "fetch":
        known = cache.peers()
        for name in args.profiles or list(known):
            try:
                cache.fetch(cache.peer(name))
            except (KeyError, cache.PeerMissing, RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"peers: {exc}", file=sys.stderr)
                return 1
        return 0
    if args.command == "classpath":
        print(cache.peer(args.profile).classpath())
        return 0
    if args.command == "tool":
        from bench.peers.tools import java_command, main_class

        cmd = java_command(cache.peer(args.profile), main_class(args.name, args.profile), args.args)
        return subprocess.call(cmd)  # interactive: the user's terminal, no timeout
    from bench.peers.kraft import KafkaBroker

    with tempfile.TemporaryDirectory(prefix="kafka-peer-") as tmp:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # so sigwait receives them
        broker = KafkaBroker(args.directory or Path(tmp)).start()
        print(f"Apache Kafka {cache.peer(broker.profile).version} ready: PLAINTEXT://{broker.bootstrap} "
              f"(logs in {broker.directory}); Ctrl-C stops it", flush=True)
        try:
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
