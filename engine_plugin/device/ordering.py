"""Queue order for direct queue operations: what must reach the queue before a
``queue.write_buffer``/``read_buffer`` made outside the execution core.

The execution core (:mod:`engine_plugin.runtime`) holds runs back (an open ``abi.batch()``, a
deferred one-shot run); a layer below it (the substrate's page writes and reads) calls
:func:`settle` first, and the core registers what settling means. Data flows one way: the
lower layer never imports the core.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["register_settle", "settle"]

_SETTLERS: list[Callable[[], None]] = []


def register_settle(fn: Callable[[], None]) -> None:
    """Have :func:`settle` call ``fn`` (once registered; the execution core does, on import)."""
    if fn not in _SETTLERS:
        _SETTLERS.append(fn)


def settle() -> None:
    """Submit what this thread recorded and has not submitted yet, so a direct queue write or
    read made next comes after it."""
    for fn in _SETTLERS:
        fn()
