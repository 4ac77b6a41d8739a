"""The mirror daemon's driver: one source cluster to one target cluster, in the mode its config
names, as MirrorMaker 2 (`mode: mm2`, mirror/mm2.py) or as read-only mirror topics with the
source's offsets on a Causeway target (`mode: link`, mirror/link.py).

    async with trio.open_nursery() as nursery:
        mirror = await nursery.start(run_mirror, config)

The driver only starts and supervises: it opens the clients, builds the mode's Mirror (the
state and loops both modes share are in mirror/runtime.py), runs the status loop beside the
mode's work, and on a stop or a refusal writes the last status. Everything below it retries
with backoff and says what it waits for: the mirror runs in the target datacenter and reads the
source across the WAN, and either cluster may be down at start or at any time.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from pathlib import Path

import trio

from broker.client import open_client
from broker.tasks import leaves
from mirror.config import MirrorConfig
from mirror.errors import MirrorRefused
from mirror.link import LinkMirror
from mirror.metrics import serve_mirror_metrics
from mirror.mm2 import Mm2Mirror
from mirror.runtime import Mirror

__all__ = ["MODES", "run_mirror"]

log = logging.getLogger(__name__)

#: Each `mode:` of a mirror config and the kind of Mirror that runs it.
MODES: dict[str, type[Mirror]] = {"mm2": Mm2Mirror, "link": LinkMirror}


async def run_mirror(config: MirrorConfig, *, status_file: Path | None = None,
                     task_status: trio.TaskStatus[Mirror] = trio.TASK_STATUS_IGNORED) -> None:
    """Run one mirror until `Mirror.stop()` (a clean stop: positions are checkpointed once more,
    so a restart repeats nothing) or until cancelled (like a crash: a restart may repeat what was
    written since the last checkpoint, never skip it). In link mode the target's log end is the
    position, so neither repeats anything. Raises MirrorRefused (after reporting it in the status)
    when the mirror cannot run as configured.

    Reports the Mirror as soon as its clients exist; it then waits (with backoff, saying so) for
    both clusters, so a cluster that is down is not an error.
    """
    name = config.display_name
    source_security, target_security = config.source.security(), config.target.security()
    async with (
        open_client(config.source.bootstrap, client_id=f"causeway-mirror-{name}-source",
                    security=source_security) as source,
        open_client(config.target.bootstrap, client_id=f"causeway-mirror-{name}-target",
                    security=target_security) as target,
        AsyncExitStack() as stack,
    ):
        lane_clients = [
            await stack.enter_async_context(open_client(config.source.bootstrap, security=source_security,
                                                        client_id=f"causeway-mirror-{name}-fetch-{i}"))
            for i in range(config.tasks_max)
        ]
        mirror = MODES[config.mode](config, source, target, status_file, lane_clients)
        await _supervise(mirror, task_status)


async def _supervise(mirror: Mirror, task_status: trio.TaskStatus[Mirror]) -> None:
    name = mirror.config.display_name
    async with trio.open_nursery() as outer:
        outer.start_soon(mirror.status_loop)
        if mirror.config.metrics_listener is not None:
            await outer.start(serve_mirror_metrics, mirror, mirror.config.metrics_listener)
        task_status.started(mirror)
        try:
            async with trio.open_nursery() as work:
                work.start_soon(mirror.run)
                await mirror.stop_requested.wait()
                work.cancel_scope.cancel()
        except BaseException as raised:  # noqa: BLE001 - re-raised; a refusal is reported first
            refused = [leaf for leaf in leaves(raised) if isinstance(leaf, MirrorRefused)]
            if refused:
                await _refused(mirror, refused[0])
            raise
        was_running = mirror.state == "running"
        mirror.state = "stopped"
        if was_running:
            await mirror.on_clean_stop()
        await mirror.write_status()
        log.info("mirror %s stopped", name)
        outer.cancel_scope.cancel()


async def _refused(mirror: Mirror, exc: BaseException) -> None:
    message = str(exc)
    log.error("mirror %s cannot run: %s", mirror.config.display_name, message)
    mirror.state = "failed"
    mirror.problems["mirror"] = message
    mirror.event(message)
    await mirror.write_status()
