"""What the `causeway pipeline` commands share: `--option KEY=VALUE` flags, `--master` and
`--verbose` and `--quiet`, the mirror named in a topology `causeway up` started, and a Spark session run for
one job, after the job's checks: bad options, paths and clusters out of reach are refused in
seconds, before Spark starts.

Spark and the pipeline are imported only when a job runs, so `causeway --help` stays quick.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from deploy.cli.command import Refused, UsageError, add_quiet

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from deploy.launcher.state_file import ClusterRecord, LaunchStateFile, MirrorRecord
    from mirror.config import MirrorConfig
    from pipeline.audit import MirrorSpec

__all__ = ["add_spark_options", "check_master", "mirror_config_from_topology", "mirror_from_topology", "mirror_logins",
           "on_spark", "option_flags", "started_mirror"]

_T = TypeVar("_T")


def option_flags(items: list[str]) -> dict[str, str]:
    """Repeated `--option KEY=VALUE` flags as the data source's read options."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--option wants KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def add_spark_options(parser: argparse.ArgumentParser) -> None:
    """--master, --verbose and --quiet, which every job takes."""
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--verbose", action="store_true",
                        help="show Spark's own output (its INFO log, the JVM's warnings and stack traces); "
                             "by default it goes to a file, named when the job fails unexpectedly")
    add_quiet(parser)


# The master URLs Spark takes (SparkContext.createTaskScheduler, and cluster managers by scheme).
_MASTER = re.compile(r"local(\[(\d+|\*)(,\s*\d+)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]|yarn|[a-z][a-z0-9+.-]*://.+")


def check_master(master: str) -> None:
    """Raise UsageError for a master URL Spark would refuse (after its start-up, 10-30 s later)."""
    if not _MASTER.fullmatch(master):
        raise UsageError(f"--master {master!r} is not a Spark master URL: local, local[N], local[*], "
                         "spark://HOST:PORT, yarn, k8s://URL")


def _session_running() -> bool:
    """Whether this process runs a SparkSession, made in any thread. getActiveSession() alone
    answers for the calling thread (the JVM keeps the active session per thread, and py4j runs
    each Python thread's calls on a JVM thread of its own): asked elsewhere it missed the session
    a test suite shares, and the job stopped it. active() falls back to the process's default
    session."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    try:
        SparkSession.active()
    except PySparkRuntimeError:
        return False
    return True


def on_spark(master: str, job: Callable[[SparkSession], _T], *, verbose: bool = False,
             checks: Callable[[], None] | None = None) -> _T:
    """`checks()` (the job's options, paths and clusters: a PipelineError there is the command's
    one-line refusal, and Spark is never started), then `job` on the SparkSession for `master`;
    a PipelineError, raised by the job or by a Spark task, becomes the command's one-line refusal.

    A session this process already runs (a notebook, a test) is used and left running; one made
    here is stopped. Spark's own output (the JVM's, and py4j's INFO lines) goes to the terminal
    only with `verbose`; otherwise into a file that is removed unless the job fails with an
    error nobody foresaw (a bug: its traceback is printed, and the file named beside it)."""
    from pipeline.options import PipelineError

    check_master(master)
    if checks is not None:
        try:
            checks()
        except PipelineError as exc:
            raise Refused(str(exc)) from None
    from pipeline.spark import session, task_failure

    owned = not _session_running()
    logging.getLogger("py4j").setLevel(logging.INFO if verbose else logging.WARNING)
    spark_log = None if verbose or not owned else tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept on a bug
        prefix="causeway-spark-", suffix=".log", delete=False)
    keep_log = False
    try:
        spark = session(master, jvm_output=spark_log, log_level="INFO" if verbose else "ERROR")
        try:
            result = job(spark)
        except PipelineError as exc:
            raise Refused(str(exc)) from None
        except Exception as exc:
            # A task's failure (a corrupt batch, a cluster gone mid-job, a killed executor) reaches
            # the driver inside Spark's exception and its Java stack: say it in one line.
            failed = task_failure(exc)
            if failed is None:
                raise
            raise Refused(str(failed)) from None
        finally:
            if owned:
                spark.stop()
        return result
    except Refused:
        raise
    except Exception:
        keep_log = True  # a bug: its traceback follows, and what Spark said may explain it
        raise
    finally:
        if spark_log is not None:
            spark_log.close()
            if keep_log:
                print(f"Spark's own output: {spark_log.name}", file=sys.stderr)
            else:
                os.unlink(spark_log.name)


def _started_mirror(args: argparse.Namespace) -> tuple[MirrorRecord, dict[str, ClusterRecord]]:
    mirror, clusters, _state_dir = started_mirror(args)
    return mirror, clusters


def started_mirror(args: argparse.Namespace) -> tuple[MirrorRecord, dict[str, ClusterRecord], Path]:
    """The mirror `args.mirror` of topology `args.topology` (its file, or its name) and its
    clusters by role (source, target), found as `causeway status` finds them: in the launcher's
    state file under `args.state_dir` (default .causeway/<topology name>), and that state dir."""
    if not args.mirror:
        raise UsageError("--mirror NAME is required with a topology")
    state, state_dir = started_topology(args)
    mirror = state.mirrors.get(args.mirror)
    if mirror is None:
        known = ", ".join(sorted(state.mirrors)) or "none"
        raise Refused(f"topology {state.name} has no mirror {args.mirror!r} (its mirrors: {known})")
    clusters = {}
    for role, cluster in (("source", mirror.source), ("target", mirror.target)):
        if cluster not in state.clusters:
            raise Refused(f"{state_dir}: mirror {args.mirror}'s {role} cluster {cluster!r} is not in the state file")
        clusters[role] = state.clusters[cluster]
    return mirror, clusters, state_dir


def started_topology(args: argparse.Namespace) -> tuple[LaunchStateFile, Path]:
    """What `causeway up` recorded for topology `args.topology` (its file, or its name): the
    launcher's state file under `args.state_dir` (default .causeway/<topology name>), and that
    state dir. Raises Refused when nothing was started from there."""
    from deploy.launcher.control import read_state
    from deploy.launcher.state_file import StateFileError
    from topology import TopologyError, load_topology

    path = Path(args.topology)
    if path.is_file():
        try:
            topology = load_topology(path)
        except TopologyError as exc:
            raise Refused(f"{path} is not a valid topology:\n{exc}") from None
        name = topology.name
    else:
        name = args.topology
    state_dir = Path(args.state_dir) if args.state_dir is not None else Path(".causeway") / name
    try:
        state = read_state(state_dir)
    except StateFileError as exc:
        raise Refused(str(exc)) from None
    if state is None:
        raise Refused(f"nothing was started from {state_dir}: run `causeway up {args.topology}` first, "
                      "or name the state dir with --state-dir")
    return state, state_dir


def mirror_logins(args: argparse.Namespace) -> dict[str, Path | None]:
    """The client properties file `causeway up` recorded for logging in to each of the mirror's
    clusters (by role: source, target) on its LOCAL listener (its `admin` user's; the state file
    names it, never a password), or None where that listener is plaintext."""
    _mirror, clusters = _started_mirror(args)
    return {role: _login_file(c) for role, c in clusters.items()}


def _login_file(cluster: ClusterRecord) -> Path | None:
    return Path(cluster.command_config) if cluster.command_config else None


def _login_options(path: Path | None) -> tuple[tuple[str, str], ...]:
    """The Kafka client security keys of the launcher's client file `path` as the pipeline's
    security options (pipeline.options.SecurityProps); none for a plaintext listener. Raises
    Refused naming the file and what cannot be used."""
    if path is None:
        return ()
    from broker.config import ConfigError, load_properties
    from pipeline.options import PipelineError, security_options

    try:
        props = load_properties(path)
    except (OSError, ConfigError) as exc:
        raise Refused(f"cannot read the client file the launcher recorded, {path}: {exc}") from None
    try:
        return security_options({f"kafka.{key}": value for key, value in props.items()})
    except PipelineError as exc:
        raise Refused(f"{path}: {exc}") from None


def mirror_config_from_topology(args: argparse.Namespace) -> MirrorConfig | None:
    """The config file the launcher wrote for mirror `args.mirror` of topology `args.topology`
    (its mode, naming, topic and group patterns), or None when the state file names none."""
    from mirror.config import load_mirror_config
    from topology import TopologyError

    mirror, _records = _started_mirror(args)
    if not mirror.config:
        return None
    try:
        return load_mirror_config(Path(mirror.config))
    except (TopologyError, OSError) as exc:
        raise Refused(f"mirror {args.mirror}'s config {mirror.config} cannot be read: {exc}") from None


def mirror_from_topology(args: argparse.Namespace) -> MirrorSpec:
    """The mirror `args.mirror` of topology `args.topology` (its file, or its name), found as
    `causeway status` finds it: the launcher's state file under `args.state_dir` (default
    .causeway/<topology name>) gives its clusters' local listeners, how to log in to a secured
    one (the launcher's admin login, as `causeway status` uses it) and the mirror's config file."""
    from mirror.config import load_mirror_config
    from pipeline.audit import MirrorSpec
    from topology import TopologyError

    mirror, records = _started_mirror(args)
    mode = mirror.mode  # what the launcher started (files from before link mode: mm2; its config says it too)
    # This machine reaches each cluster on its local listener, not through the WAN link.
    clusters = {role: record.bootstrap for role, record in records.items()}
    kwargs: dict[str, object] = {
        "source_alias": mirror.source, "target_alias": mirror.target,
        # A secured cluster's LOCAL listener: the login the launcher wrote for its admin user.
        **{f"{role}_security": _login_options(_login_file(record)) for role, record in records.items()}}
    if mirror.config:
        try:
            config = load_mirror_config(Path(mirror.config))
        except (TopologyError, OSError) as exc:
            raise Refused(f"mirror {args.mirror}'s config {mirror.config} cannot be read: {exc}") from None
        kwargs.update(source_alias=config.source.alias, target_alias=config.target.alias,
                      identity=config.naming == "identity", separator=config.separator,
                      include=tuple(config.topics.include), exclude=tuple(config.topics.exclude),
                      offset_syncs_location=config.offset_syncs_location)
        mode = config.mode  # the launcher writes the mirror's mode into its config
    return MirrorSpec(clusters["source"], clusters["target"], mode=mode, name=args.mirror,
                      **kwargs)  # type: ignore[arg-type]
