"""Small Java programs beside the peers (bench/peers/*.java), compiled once against a peer's jars.

`javac` costs a second or two, so each source is compiled into the peer's cache directory, under
a name holding the digest of the source, and reused until the source (or the peer) changes. A
lock makes concurrent runs wait for one compile; the classes are compiled to a scratch directory
and renamed into place, so a half-compiled directory is never used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from bench.peers.cache import Peer, build_once, peer
from bench.peers.tools import LOG4J2_TOOLS, TOOL_JVM_FLAGS, TOOL_TIMEOUT_S, ToolRun, java_command

COMPILE_TIMEOUT_S = 120.0


def compiled(source: Path, target: Peer) -> Path:
    """The directory of `source`'s classes, compiled against `target`'s jars if not yet done."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    classes = target.directory / "classes" / f"{source.stem}-{digest}"

    def build() -> None:
        scratch = classes.with_name(f"{classes.name}.partial-{os.getpid()}")
        shutil.rmtree(scratch, ignore_errors=True)
        done = subprocess.run(["javac", "-nowarn", "-d", str(scratch), "-cp", target.classpath(), str(source)],
                              capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            shutil.rmtree(scratch, ignore_errors=True)
            raise RuntimeError(f"javac {source.name} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        scratch.rename(classes)

    build_once(classes.parent, classes.is_dir, build)
    return classes


def run_java_program(source: Path, *args: str, profile: str = "kafka4", timeout: float = TOOL_TIMEOUT_S) -> ToolRun:
    """Compile (once) and run the program in `source` (its class named as the file); raises
    ToolFailed when it exits non-zero."""
    target = peer(profile)
    classes = compiled(source, target)
    cmd = java_command(target, source.stem, args, jvm_flags=TOOL_JVM_FLAGS, log4j2=LOG4J2_TOOLS)
    at = cmd.index("-cp") + 1
    cmd[at] = os.pathsep.join([str(classes), cmd[at]])
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    return ToolRun([source.stem, *args], done.returncode, done.stdout, done.stderr, cmd).check()
