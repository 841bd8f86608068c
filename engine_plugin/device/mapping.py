"""Mapping staging buffers for reading: one entry point for the backend ring and ``abi.read``."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["map_submitted", "settled", "staging_bytes"]

from .flags import MAP_MODE_READ as _MAP_MODE_READ

# wgpu-py's map_async(READ) first submits an empty command buffer (a workaround for mapping a
# buffer no submission touched yet); on lavapipe every submit waits for the previous one, so
# that would bill the GPU work to the frame. Staging copies are always submitted before their
# map: the case wgpu-py's own queue.read_buffer maps with this internal mode.
_MAP_MODE_READ_SUBMITTED = "READ_NOSYNC"


def map_submitted(staging: Any, size: int) -> Any:
    """Start mapping a staging buffer whose copy is already submitted (see above)."""
    try:
        return staging.map_async(_MAP_MODE_READ_SUBMITTED, 0, size)
    except (KeyError, ValueError, TypeError):  # a wgpu-py without the internal mode
        return staging.map_async(_MAP_MODE_READ, 0, size)


def settled(promise: Any, timeout: float, urgent: bool = False) -> bool:
    """Wait up to ``timeout`` for ``promise`` to receive its result, without resolving it.
    ``urgent``: the caller has nothing else to do until then (a read, a drain): the device's
    poller waits inside the driver meanwhile, which answers soonest but holds the device
    (see :mod:`engine_plugin.device.poller`); a background waiter leaves it False.

    wgpu 0.32's public ``sync_wait()`` has no timeout, and a destroyed device's promises never
    settle (``device.destroy()`` stops wgpu's poll thread). Its native ``sync_wait`` waits on
    ``promise._thread_event``; waiting on that same event with a timeout lets the waiter notice
    cancellation. A promise without it (not wgpu-native) counts as settled, so its caller's
    ``sync_wait()`` blocks as the public API does.
    """
    event = getattr(promise, "_thread_event", None)
    if not isinstance(event, threading.Event):
        return True
    if event.is_set() or not urgent or timeout <= 0:
        return event.wait(timeout)
    from .poller import SPIN_S, promise_poller, spin_until, urgent_wait  # not at import: this module is imported without wgpu

    poller = promise_poller(promise)
    if spin_until(event, poller, min(timeout, SPIN_S)):
        return True
    with urgent_wait(poller):
        return event.wait(timeout)


def staging_bytes(size_class: int, size: int, device: Any) -> int:
    """The bytes of a pooled staging buffer for ``size`` bytes: its ``size_class``, or ``size``
    itself where the class is past ``device``'s largest buffer (lavapipe's is 2^31 - 1: a legal
    read of 1 GiB and a bit asked for 2 GiB, failed, and a backend's failure disabled it:
    review helpers 189, 191). Such a buffer is not a size class, so no pool keeps it."""
    if size_class < 1 << 28 or size_class <= size:  # (the device's limit is read for the large only)
        return size_class
    limits = getattr(device, "limits", None) or {}
    return size if size_class > int(limits.get("max-buffer-size", size_class)) else size_class
