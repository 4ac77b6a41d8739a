"""The reverse mirror a failback drill runs: a link-mode mirror from the new primary (the DR
site) to the old one, with the forward mirror's settings, as a `causeway mirror --config FILE`
process of the drill's own (the topology declares only the forward mirror), started once the old
primary's topics are restored and stopped once they are promoted back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from deploy.launcher.state_file import LaunchStateFile

__all__ = ["ReverseMirror", "reverse_config"]

READY = "causeway mirror ready: "
STOP_GRACE_S = 10.0


def reverse_config(state: LaunchStateFile, forward: str, reverse: str) -> dict[str, Any]:
    """The forward mirror's config (the launcher's file) with source and target swapped: it runs
    in the old primary's datacenter and reads the new primary through the WAN link's proxy."""
    record = state.mirrors[forward]
    if record.config is None:
        raise LookupError(f"mirror {forward}: the launcher recorded no config file")
    config: dict[str, Any] = json.loads(Path(record.config).read_text())
    old, new = state.clusters[record.source], state.clusters[record.target]
    config.pop("metrics.listener", None)
    config["name"] = reverse
    config["source"] = {"alias": record.target, "bootstrap": new.wan.get(old.datacenter, new.bootstrap)}
    config["target"] = {"alias": record.source, "bootstrap": old.bootstrap}
    return config


class ReverseMirror:
    """One `causeway mirror` process; its output goes to `<state dir>/logs/mirror-<name>.log`."""

    def __init__(self, state_dir: Path, config: dict[str, Any]) -> None:
        name = str(config["name"])
        self.config_file = state_dir / "mirrors" / f"{name}.yaml"
        self.log = state_dir / "logs" / f"mirror-{name}.log"
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> ReverseMirror:
        with self.log.open("wb") as out:  # a fresh log: its ready line is this run's
            self._process = subprocess.Popen([sys.executable, "-m", "deploy.cli", "mirror", "--config",
                                              str(self.config_file)], stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=os.environ.copy())
        deadline = time.monotonic() + timeout_s
        while READY not in self.log.read_text(errors="replace"):
            if self._process.poll() is not None:
                raise RuntimeError(f"the reverse mirror exited ({self._process.returncode}): see {self.log}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the reverse mirror was not ready after {timeout_s:.0f} s: see {self.log}")
            time.sleep(0.1)
        return self

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        """SIGTERM (the mirror checkpoints its positions once more), SIGKILL after the grace period."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
