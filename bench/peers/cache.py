"""Where the peers' jars live, and how `make peers` fetches them with Maven.

Each profile of pom.xml beside this file is one peer (`kafka4`: Apache Kafka 4.x with its tools
and MirrorMaker 2; `kafka3`: Kafka 3.9.x for ZooKeeper mode). Its jars are copied into
``<cache>/<profile>-<version>/lib`` with a stamp holding the digest of that profile (and the pom's
shared build settings), so a later run whose profile is unchanged does nothing and prints nothing.
The cache is outside the repo (``$CAUSEWAY_PEERS_DIR``, else ``$XDG_CACHE_HOME/causeway/peers``,
else ``~/.cache/causeway/peers``) so every clone and every CI run on the machine shares it.
Standard library only: `make peers` runs this before anything else is needed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

POM = Path(__file__).with_name("pom.xml")
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
# A fresh resolve downloads ~60 MB per peer; far more than that means the registry is stuck.
FETCH_TIMEOUT_S = 900.0


class PeerMissing(RuntimeError):
    """A peer's jars are not in the cache (or are older than the pom): run `make peers`."""


def cache_root() -> Path:
    explicit = os.environ.get("CAUSEWAY_PEERS_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "causeway" / "peers"


def pom_digest(profile: str) -> str:
    """The digest a profile's stamp holds: of the pom's shared build settings and that profile
    alone, so adding or changing one peer does not make every other peer look stale (and send
    every test run to Maven while it is fetched again)."""
    root = ET.parse(POM).getroot()
    digest = hashlib.sha256()
    for part in root.iterfind("m:build", _NS):
        digest.update(ET.tostring(part))
    for found in root.iterfind("m:profiles/m:profile", _NS):
        if (found.findtext("m:id", namespaces=_NS) or "").strip() == profile:
            found.tail = None  # the text after the profile belongs to the next one
            digest.update(ET.tostring(found))
    return digest.hexdigest()


@dataclass(frozen=True)
class Peer:
    """One resolved classpath: a pom profile at the Kafka version it pins."""

    profile: str
    version: str

    @property
    def directory(self) -> Path:
        return cache_root() / f"{self.profile}-{self.version}"

    @property
    def lib(self) -> Path:
        return self.directory / "lib"

    @property
    def stamp(self) -> Path:
        return self.directory / "resolved"

    def is_fresh(self) -> bool:
        try:
            return self.stamp.read_text().strip() == pom_digest(self.profile) and self.lib.is_dir()
        except OSError:
            return False

    def jars(self) -> list[Path]:
        if not self.is_fresh():
            raise PeerMissing(f"peer {self.profile} {self.version} is not fetched into {self.directory} "
                              "(or its pom profile changed since): run `make peers`")
        return sorted(self.lib.glob("*.jar"))

    def classpath(self) -> str:
        return os.pathsep.join(str(jar) for jar in self.jars())


def peers() -> dict[str, Peer]:
    """Every profile of the pom, by id, with the `kafka.version` (or `spark.version`) it sets."""
    root = ET.parse(POM).getroot()
    found: dict[str, Peer] = {}
    for profile in root.iterfind("m:profiles/m:profile", _NS):
        ident = profile.findtext("m:id", namespaces=_NS)
        version = (profile.findtext("m:properties/m:kafka.version", namespaces=_NS)
                   or profile.findtext("m:properties/m:spark.version", namespaces=_NS))
        if ident and version:
            found[ident] = Peer(ident.strip(), version.strip())
    return found


def peer(profile: str = "kafka4") -> Peer:
    known = peers()
    if profile not in known:
        raise KeyError(f"no peer profile {profile!r} in {POM} (known: {', '.join(sorted(known))})")
    return known[profile]


def maven() -> str:
    path = shutil.which("mvn")
    if path is None:
        raise PeerMissing("Maven (`mvn`) is not installed: `make peers` installs it as root (make system-deps), "
                          "or install the Debian package `maven`")
    return path


def fetch(target: Peer, *, say: Callable[[str], None] = print) -> bool:
    """Resolve `target` into its cache directory unless it is already there. True if it fetched.

    Maven copies into a scratch directory first, swapped in only when complete, so an interrupted
    fetch never leaves a half classpath that looks fresh; a lock on the peer's directory makes a
    second `make peers` on the machine (another clone, CI) wait for the first and then find it done.
    """
    return build_once(target.directory, target.is_fresh, lambda: _resolve(target, say))


def build_once(directory: Path, done: Callable[[], bool], build: Callable[[], None]) -> bool:
    """Run `build` unless `done()` already holds, under a lock on `directory`/.lock: a second run
    on the machine (another clone, CI, a parallel test) waits for the first, then finds it done.
    True if this call built."""
    if done():
        return False
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done():
            return False
        build()
    return True


def _resolve(target: Peer, say: Callable[[str], None]) -> None:
    scratch = target.directory / f"lib.partial-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    cmd = [maven(), "-B", "-q", "--no-transfer-progress", "-f", str(POM), "-P", target.profile,
           "dependency:copy-dependencies", f"-DoutputDirectory={scratch}"]
    say(f"peers: fetching {target.profile} {target.version} into {target.directory}")
    say("peers: $ " + " ".join(cmd))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    if done.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise RuntimeError(f"mvn failed ({done.returncode}) resolving {target.profile}:\n{done.stdout}{done.stderr}")
    shutil.rmtree(target.lib, ignore_errors=True)
    shutil.rmtree(target.directory / "cds", ignore_errors=True)  # the tools' class-data archives name old jars
    scratch.rename(target.lib)
    target.stamp.write_text(pom_digest(target.profile) + "\n")
    jars = list(target.lib.glob("*.jar"))
    size = sum(jar.stat().st_size for jar in jars)
    say(f"peers: {target.profile}: {len(jars)} jars, {size / 1e6:.0f} MB in {target.lib}")
