"""One Prometheus server (Debian's `prometheus` package) run by Causeway: its command line, its
readiness, its stop.

Prometheus prints nothing on stdout that says it is ready, so, as for a JVM, readiness is a probe:
its own `GET /-/ready` answering 200 (deploy/child_process.py `wait_ready`, bounded). It is
started with a parent-death signal, so it dies with whoever runs it (`causeway prometheus`, which
the launcher supervises like its other children). Nothing here uses the package's own service
(`/etc/prometheus`, port 9090): every run has its own config file, data dir and address.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

import trio

from deploy.child_process import ChildProcess

__all__ = ["PROMETHEUS", "PROMTOOL", "READY_PREFIX", "PrometheusExited", "PrometheusMissing", "check_installed",
           "is_ready", "prometheus_argv", "run_prometheus"]

#: Where Debian's package puts the server and its checker (`apt-get install prometheus`).
PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
#: What `causeway prometheus` prints once the server answers, then its URL.
READY_PREFIX = "causeway prometheus ready: "
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 20.0  # SIGTERM, then SIGKILL: Prometheus writes its head block's WAL on the way out
_PROBE_INTERVAL_S = 0.2


class PrometheusMissing(RuntimeError):
    """The Debian package is not installed."""


class PrometheusExited(RuntimeError):
    """The server exited on its own after it was ready."""


def check_installed() -> None:
    """Raise PrometheusMissing unless Debian's package is installed."""
    if not PROMETHEUS.is_file():
        raise PrometheusMissing(f"Prometheus is not installed ({PROMETHEUS} is missing): run `make system-deps` "
                                "as root, or `apt-get install prometheus`")


def prometheus_argv(config_file: Path, data_dir: Path, listen: str, retention: str = "15d") -> list[str]:
    """The server's command line: its own config, data dir (`--storage.tsdb.path`) and address."""
    return [str(PROMETHEUS), f"--config.file={config_file}", f"--storage.tsdb.path={data_dir}",
            f"--web.listen-address={listen}", f"--storage.tsdb.retention.time={retention}"]


def is_ready(url: str, timeout_s: float = 1.0) -> bool:
    """Whether the server at `url` answers `/-/ready` with 200 (it has loaded its config and
    its storage). Only an `http://HOST:PORT` URL is asked (a state file names it, and anyone may
    have written that): anything else is not ready."""
    if not re.fullmatch(r"http://[A-Za-z0-9.:\[\]-]+", url):
        return False
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=timeout_s) as answer:  # noqa: S310 - our own http URL
            return int(answer.status) == 200
    except (OSError, urllib.error.URLError, ValueError):
        return False


async def run_prometheus(config_file: Path, data_dir: Path, listen: str, log_path: Path, *, retention: str = "15d",
                         task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Run Prometheus until cancelled (then SIGTERM, SIGKILL after STOP_GRACE_S); its URL goes to
    `task_status` once it is ready. Its stdout and stderr go to `log_path`.

    Raises PrometheusMissing without the package, ChildFailed (with the log's tail) when it
    exits or stays unready before START_TIMEOUT_S (a bad config, a port taken), and
    PrometheusExited when it exits later.
    """
    check_installed()
    await trio.to_thread.run_sync(partial(data_dir.mkdir, parents=True, exist_ok=True))
    url = f"http://{listen}"
    # On the trio thread, which lives as long as the server should (see deploy/child_process.py).
    child = ChildProcess.start("prometheus", prometheus_argv(config_file, data_dir, listen, retention),
                               log_path=log_path, stdout="log", die_with_parent=True)
    try:
        await trio.to_thread.run_sync(child.wait_ready, lambda: is_ready(url), START_TIMEOUT_S, _PROBE_INTERVAL_S)
        task_status.started(url)
        code = await child.wait_exited()
        raise PrometheusExited(f"prometheus (pid {child.pid}) exited with {code}; log:\n{child.log_tail()}")
    finally:
        await child.aclose(STOP_GRACE_S)

