"""Device loss as the ABI reports it: a :class:`DeviceLostError`, never a raw wgpu error.

wgpu-py 0.32 has no ``device.lost``: after a loss every call on the device raises
``GPUValidationError ... Parent device is lost`` (and reads fail in the poll thread). The
runtime wraps its GPU calls in :func:`device_guard`: a loss marks the context lost (its
caches dropped in one step), so the next ``get_context()`` acquires a fresh device and a
``Program`` re-homes its variants there (see ``Program.variant``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from ..device.context import DeviceContext
from ..device.loss import DeviceFault, classify, is_poll_thread_stopped
from ..errors import DeviceLostError

__all__ = ["device_guard", "mark_lost", "lost_error", "LOST_HINT"]

LOST_HINT = "the GPU device was lost (a driver reset or device.destroy()); get the variant again with program.variant(...) to compile it on a new device"


def mark_lost(ctx: DeviceContext) -> None:
    """Fail closed: nothing more is submitted on ``ctx``; its caches go in one step."""
    if not ctx.lost:
        ctx.lost = True
        ctx.drop_caches()


def lost_error(ctx: DeviceContext, exc: BaseException) -> DeviceLostError | None:
    """What :func:`device_guard` raises for ``exc`` (marking ``ctx`` lost), or None when
    ``exc`` is no loss; for hot paths that inline the guard with a plain ``try``."""
    if isinstance(exc, DeviceLostError):
        return exc
    if classify(exc) == DeviceFault.LOST or is_poll_thread_stopped(exc) or _lost_behind(ctx, exc):
        mark_lost(ctx)
        return DeviceLostError(LOST_HINT)
    return None


def _lost_behind(ctx: DeviceContext, exc: BaseException) -> bool:
    """Whether ``exc``, no wgpu error, came from a device that is gone: wgpu-py's own code
    fails on a reset device with plain Python errors (``map_async``'s ``AttributeError:
    'NoneType' object has no attribute 'get_token'``, cffi's ``TypeError``). One 4-byte probe
    write tells; it raises only on a lost device."""
    if not isinstance(exc, (AttributeError, TypeError, RuntimeError)):
        return False
    probe = getattr(ctx.guard, "probe_lost", None)
    return bool(probe()) if probe is not None else False


@contextmanager
def device_guard(ctx: DeviceContext) -> Iterator[None]:
    """Run GPU calls on ``ctx``; a lost device becomes :class:`DeviceLostError`."""
    if ctx.lost:
        raise DeviceLostError(LOST_HINT)
    try:
        yield
    except DeviceLostError:
        raise
    except Exception as exc:
        lost = classify(exc) == DeviceFault.LOST or is_poll_thread_stopped(exc) or _lost_behind(ctx, exc)
        if not lost:
            raise
        mark_lost(ctx)
        raise DeviceLostError(LOST_HINT) from None
