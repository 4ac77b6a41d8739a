"""Run Apache Kafka's command-line tools by their main classes on the cached classpath.

``kafka-topics.sh`` and friends are thin wrappers around ``kafka-run-class.sh <main class>``; the
jars from Maven Central carry no scripts, so the tools are started here the same way:
``java -cp <peer's jars> <main class> ARGS``, with a bounded timeout and modest JVM flags (two
cores are shared: one small heap, the serial collector, the client compiler only).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers.cache import Peer, peer

LOG4J2_TOOLS = Path(__file__).with_name("tools-log4j2.properties")
LOG4J1_TOOLS = Path(__file__).with_name("tools-log4j.properties")  # Kafka 3.9.x logs through reload4j

# The main class behind each script of Kafka 4.x's bin/ (checked against the 4.3.1 jars).
TOOLS: dict[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",  # still in the core (Scala) jar in 4.x
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-server-start": "kafka.Kafka",
    "connect-mirror-maker": "org.apache.kafka.connect.mirror.MirrorMaker",
    # Operator tools beyond the list (docs/kafka-tools.md says which work against Causeway).
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
}
# Where Kafka 3.9.x differs (checked against the 3.9.2 jars).
TOOLS_BY_PROFILE: dict[str, dict[str, str]] = {
    "kafka3": {"kafka-console-producer": "kafka.tools.ConsoleProducer", "kafka-acls": "kafka.admin.AclCommand"},
}

# Short-lived tools: start fast, stay small. The JVM's own warnings go to stderr (by default they
# share stdout with what the tool prints, which callers parse). Benchmarks pass their own flags.
TOOL_JVM_FLAGS: tuple[str, ...] = ("-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                                   "-Xshare:auto", "-Xlog:disable", "-Xlog:all=warning,cds*=off:stderr",
                                   "-Djava.awt.headless=true")
TOOL_TIMEOUT_S = 60.0


def main_class(tool: str, profile: str = "kafka4") -> str:
    known = {**TOOLS, **TOOLS_BY_PROFILE.get(profile, {})}
    if tool in known:
        return known[tool]
    if "." in tool:  # a main class named outright
        return tool
    raise KeyError(f"unknown Kafka tool {tool!r}; known: {', '.join(sorted(known))}")


@dataclass
class ToolRun:
    """What one tool run did; `check()` raises with everything it printed."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    command: list[str] = field(repr=False, default_factory=list)

    def check(self) -> ToolRun:
        if self.returncode != 0:
            raise ToolFailed(self)
        return self

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]


class ToolFailed(RuntimeError):
    def __init__(self, run: ToolRun) -> None:
        super().__init__(f"{' '.join(run.argv)} exited {run.returncode}\n--- stdout\n{run.stdout}"
                         f"--- stderr\n{run.stderr}")
        self.run = run


def java_command(target: Peer, main: str, args: Sequence[str], *, jvm_flags: Sequence[str] = TOOL_JVM_FLAGS,
                 log4j2: Path = LOG4J2_TOOLS) -> list[str]:
    return ["java", *jvm_flags, f"-Dlog4j2.configurationFile={log4j2}", f"-Dlog4j.configuration=file:{LOG4J1_TOOLS}",
            "-cp", target.classpath(), main, *args]


def class_data_sharing(target: Peer, main: str, jvm_flags: Sequence[str]) -> tuple[list[str], Path | None]:
    """JVM flags that reuse this tool's class-data archive, or dump one at exit when there is none.

    A tool's JVM spends most of its ~1 s loading and verifying classes; a dynamic CDS archive of the
    classes one run loaded halves the next start. One archive per main class and flag set, beside the
    peer's jars (the JVM checks it against the classpath and ignores a stale one). It is dumped to a
    private name and renamed into place, so concurrent runs never read a half-written archive.
    """
    key = hashlib.sha256("\0".join(jvm_flags).encode()).hexdigest()[:12]
    archive = target.directory / "cds" / f"{main}-{key}.jsa"
    if archive.is_file():
        return [f"-XX:SharedArchiveFile={archive}"], None
    archive.parent.mkdir(exist_ok=True)
    # Unique per JVM: one Python process may start several of the same tool at once.
    partial = archive.with_name(f"{archive.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")
    return [f"-XX:ArchiveClassesAtExit={partial}"], partial


def keep_archive(partial: Path | None, clean_exit: bool) -> None:
    """Put a dumped archive in place, only from a run that ended well: a tool that failed early
    (a bad option) loaded few classes, and its archive would stay the tool's archive for good."""
    if partial is None or not partial.exists():
        return
    if clean_exit:
        partial.replace(partial.with_name(partial.name.split(".jsa.", 1)[0] + ".jsa"))
    else:
        partial.unlink(missing_ok=True)


def run_tool(tool: str, *args: str, stdin: str | None = None, timeout: float = TOOL_TIMEOUT_S,
             profile: str = "kafka4", jvm_flags: Sequence[str] = TOOL_JVM_FLAGS) -> ToolRun:
    """Run one Kafka tool to completion (killed after `timeout` s: subprocess.TimeoutExpired)."""
    target = peer(profile)
    main = main_class(tool, profile)
    sharing, partial = class_data_sharing(target, main, jvm_flags)
    cmd = java_command(target, main, args, jvm_flags=[*jvm_flags, *sharing])
    done = None
    try:
        done = subprocess.run(cmd, input=stdin if stdin is not None else "", capture_output=True, text=True,
                              timeout=timeout)
    finally:
        keep_archive(partial, done is not None and done.returncode == 0)
    return ToolRun([tool, *args], done.returncode, done.stdout, done.stderr, cmd)
