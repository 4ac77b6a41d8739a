"""The descriptors a test opens in this (pytest's) process and leaves open: a leak check that
only looks at what the test itself opened.

Counting every descriptor of the process is not that check: an earlier test's socket that
became cyclic garbage is closed whenever the garbage collector runs, perhaps in the middle of
this test, and the count drops by one with nothing of this test's to blame (one full-suite run
failed so). So the check compares which descriptors are open, each named by its number and
what it refers to (`socket:[inode]`, a path, `anon_inode:[pidfd]`): one closed meanwhile is
no longer open and is not reported; one this test opened and left open is, by name, even when
the kernel gave it a number that an earlier, since closed, descriptor had.

No `gc.collect()` before the last look, on purpose: a descriptor of this test's that only the
garbage collector would close is a leak, and it is reported.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["no_descriptor_left_open", "open_descriptors"]


def open_descriptors() -> dict[int, str]:
    """This process's open descriptors: number -> what it refers to (the /proc/self/fd link)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:  # closed between the listing and the look (the listing's own, or another thread's)
            continue
    return found


@contextmanager
def no_descriptor_left_open() -> Iterator[None]:
    """Fail, naming them, if descriptors opened inside the block are still open after it.

    Raises AssertionError listing each left-open descriptor's number and target; an exception
    from the block itself goes through unchanged (no check then)."""
    before = open_descriptors()
    yield
    left = {fd: target for fd, target in open_descriptors().items() if before.get(fd) != target}
    assert not left, f"descriptors opened and left open: {left}"
