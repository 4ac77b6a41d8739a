"""`python -m deploy.fuzz [--bootstrap HOST:PORT] [--frames N] [--seed S]`: fuzz a broker with
mutated Kafka frames and judge it; one summary line, exit 1 when the broker failed.

Without --bootstrap the fuzzer starts its own `causeway broker` (a `deploy.broker_process`
BrokerProcess: a fresh data dir, a free loopback port, ready once it prints its ready line),
watches it through /proc and its log, and stops it at the end (a clean stop is part of the
verdict).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from deploy.broker_process import BrokerProcess
from deploy.fuzz.run import FuzzOptions, run_fuzz
from deploy.fuzz.wire import LoopbackOnly

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.fuzz",
        description="Send mutated Kafka frames (every API the broker serves, every version; lengths, counts, "
                    "headers, sizes and record batches tampered with) over many pipelined connections, then "
                    "check that the broker lives, holds bounded memory and descriptors, and serves a real "
                    "client.")
    parser.add_argument("--bootstrap", metavar="HOST:PORT",
                        help="a running broker on this machine (default: start one)")
    parser.add_argument("--frames", type=int, default=50_000, help="frames to send (default 50000)")
    parser.add_argument("--seed", type=int, default=1, help="the run's seed: same seed, same frames (default 1)")
    parser.add_argument("--connections", type=int, default=128, help="connections open at once (default 128)")
    parser.add_argument("--time-limit", type=float, default=1800.0, metavar="SECONDS",
                        help="stop sending after this long, and fail (default 1800)")
    parser.add_argument("--check-every", type=int, default=20_000, metavar="FRAMES",
                        help="frames between /proc samples and ApiVersions probes (default 20000)")
    parser.add_argument("--pid", type=int, help="the broker's pid (default: found from the listening port)")
    parser.add_argument("--log", type=Path, help="the broker's log, scanned for internal errors")
    parser.add_argument("--log-limit", type=int, default=1024 * 1024, metavar="BYTES",
                        help="fail when the broker's log grows by more than this per minute (default 1 MiB; "
                             "needs --log or a broker the fuzzer starts; 0: not judged)")
    parser.add_argument("--rss-growth-limit", type=float, default=256.0, metavar="MIB",
                        help="fail when RSS grows more than this over its baseline (default 256)")
    parser.add_argument("--no-round-trip", action="store_true", help="skip the confluent-kafka round trip")
    parser.add_argument("--replay", type=int, metavar="CONNECTION",
                        help="send only this connection's frames (from a report), and print them")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="broker config for the broker the fuzzer starts (repeatable)")
    parser.add_argument("--work-dir", type=Path, help="data dir and log of the broker the fuzzer starts "
                                                      "(default: a new temporary directory, removed on success)")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")
    args = parser.parse_args(argv)

    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    broker = None
    work_dir: Path | None = None
    bootstrap, log_path, pid = args.bootstrap, args.log, args.pid
    if bootstrap is None:
        work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="causeway-fuzz-"))
        work_dir.mkdir(parents=True, exist_ok=True)
        broker = BrokerProcess(work_dir / "broker", overrides=tuple(args.override))  # its log: broker.log
        try:
            broker.start()
        except RuntimeError as exc:
            print(f"fuzz: {exc}", file=sys.stderr)
            return 1
        assert broker.proc is not None
        bootstrap, log_path, pid = broker.bootstrap, broker.log_path, broker.proc.pid
    options = FuzzOptions(
        bootstrap=bootstrap, frames=args.frames, seed=args.seed, connections=args.connections,
        time_limit_s=args.time_limit, check_every=args.check_every, pid=pid, log_path=log_path,
        rss_growth_limit_mib=args.rss_growth_limit, log_bytes_per_minute_limit=args.log_limit or None,
        round_trip=not args.no_round_trip, replay=args.replay)
    try:
        result = run_fuzz(options, progress=progress)
    except LoopbackOnly as exc:
        print(f"fuzz: {exc}", file=sys.stderr)
        return 2
    finally:
        code = broker.stop() if broker is not None else 0
    if broker is not None and code != 0 and result.passed:
        result.failures.append(f"the broker did not stop cleanly (exit {code}); see {log_path}")
    print(result.summary(), flush=True)
    if not result.passed:
        details = result.details()
        if details:
            print(details, file=sys.stderr)
        if work_dir is not None:
            print(f"fuzz: the broker's data and log are kept in {work_dir}", file=sys.stderr)
    elif work_dir is not None and args.work_dir is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0 if result.passed else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
