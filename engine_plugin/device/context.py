"""Device acquisition and the per-device context that owns GPU-side caches.

One shared adapter/device per process unless the caller hands its own. A real GPU is chosen
over a software one (lavapipe) when both exist; ``ENGINE_PLUGIN_ADAPTER`` forces one by a
case-insensitive substring of the adapter's name, vendor or type (``llvmpipe``, ``nvidia``,
``cpu``). The device's limits are raised to what the adapter allows, because the defaults
(128 MiB storage bindings, 8 storage buffers) are far below what an engine needs.

Caches of compiled objects live on the :class:`DeviceContext`, so a lost device drops all of
them at once and a new device never sees an object made for the old one.

A context's ``lost`` flag is its device's :class:`~engine_plugin.device.guard.SubmissionGuard`
flag: set by ``device.destroy()`` (from any thread), by a backend that found the loss, or by
a probe after the ``wgpu`` logger reported one. ``get_context()`` never hands out the default
context once it is lost: it acquires a fresh device instead.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import wgpu

from ..errors import NoAdapterError
from .destroyed import install as install_destroy_marks
from .guard import SubmissionGuard, guard_for
from .poller import install as install_poller

__all__ = ["DeviceContext", "adapter_summary", "fresh_context", "get_context", "reset_default_context"]

log = logging.getLogger("engine_plugin.gpu")

# Limits worth raising to the adapter's maximum; anything else keeps wgpu's defaults.
# Optional features taken where the adapter has them (shader-f16: a body's `enable f16;`).
_WANTED_FEATURES = ("float32-filterable", "bgra8unorm-storage", "timestamp-query", "shader-f16")
_RAISED_LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-storage-buffers-per-shader-stage",
    "max-compute-workgroups-per-dimension",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-workgroup-size-z",
    "max-compute-workgroup-storage-size",
    "max-uniform-buffer-binding-size",
    "max-bind-groups",
    "max-bindings-per-bind-group",
    "max-dynamic-uniform-buffers-per-pipeline-layout",
)


def adapter_summary(adapter: Any) -> str:
    info = adapter.info
    return f"{info.get('device', '?')} ({info.get('adapter_type', '?')}, {info.get('backend_type', '?')})"


def _opengl(adapter: Any) -> bool:
    return str(adapter.info.get("backend_type", "")).startswith("OpenGL")  # OpenGL, OpenGLES


def require_adapter() -> str:
    """The adapter a device would be made on, summarised, without making one.

    Raises:
        NoAdapterError: there is none this package can use (the same error ``get_context``
            raises), for a command to say once before work that needs one.
    """
    return adapter_summary(_pick_adapter())


def _pick_adapter() -> Any:
    try:
        adapters = list(wgpu.gpu.enumerate_adapters_sync())
    except Exception as exc:  # the loader itself is missing or broken
        raise NoAdapterError(
            f"wgpu could not enumerate adapters ({exc}); install the Vulkan loader and a driver (Debian: apt-get install libvulkan1 mesa-vulkan-drivers)"
        ) from exc
    if not adapters:
        raise NoAdapterError("no wgpu adapter found; install a Vulkan driver (Debian: apt-get install libvulkan1 mesa-vulkan-drivers) and set XDG_RUNTIME_DIR")
    # wgpu's OpenGL backend lacks features some kernels here need (a bgra8unorm storage
    # texture, which the demo's colorize asset writes: a bake of the packaged kernels failed on
    # it), and an adapter list may name the same CPU device under Vulkan and OpenGL: OpenGL is
    # taken only when named (ENGINE_PLUGIN_ADAPTER=opengl), never by default nor by a name
    # both twins share (review helpers 190, 191).
    usable = [a for a in adapters if not _opengl(a)]
    wanted = os.environ.get("ENGINE_PLUGIN_ADAPTER", "").strip().lower()
    if wanted:
        for adapter in usable + [a for a in adapters if _opengl(a)]:  # a Vulkan twin first
            info = adapter.info
            hay = " ".join(str(info.get(k, "")) for k in ("device", "vendor", "adapter_type", "description", "backend_type"))
            if wanted in hay.lower() and (not _opengl(adapter) or "opengl" in wanted):
                return adapter
        names = ", ".join(adapter_summary(a) for a in adapters)
        raise NoAdapterError(f"ENGINE_PLUGIN_ADAPTER={wanted!r} matches none of: {names} (an OpenGL one only as ENGINE_PLUGIN_ADAPTER=opengl)")
    if not usable:
        names = ", ".join(adapter_summary(a) for a in adapters)
        raise NoAdapterError(
            f"only an OpenGL adapter was found ({names}); wgpu's OpenGL backend lacks features some kernels need (bgra8unorm storage "
            "textures); install a Vulkan driver (Debian: apt-get install libvulkan1 mesa-vulkan-drivers), or set ENGINE_PLUGIN_ADAPTER=opengl to use it anyway"
        )
    rank = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
    return min(usable, key=lambda a: rank.get(str(a.info.get("adapter_type")), 4))


class DeviceContext:
    """A wgpu device with its limits and the caches of objects compiled for it.

    ``caches`` is a plain dict of named dicts (``ctx.cache("pipelines")``); everything in it
    belongs to this device and is dropped with it.
    """

    def __init__(self, device: Any, adapter: Any | None = None):
        install_destroy_marks()  # runs refuse a destroyed buffer instead of aborting in wgpu-native
        install_poller(device)  # the frame thread never waits inside wgpu for the GPU (device/poller.py)
        self.device = device
        self.adapter = adapter
        self.queue = device.queue
        self.limits = dict(device.limits)
        self.guard: SubmissionGuard = guard_for(device)
        self._caches: dict[str, dict] = {}
        self.lock = threading.RLock()

    @property
    def lost(self) -> bool:
        """Whether the device is known lost (sticky)."""
        return self.guard.lost

    @lost.setter
    def lost(self, value: bool) -> None:
        if value:
            self.guard.mark_lost("marked lost by its owner")

    @property
    def adapter_name(self) -> str:
        return adapter_summary(self.adapter) if self.adapter is not None else "<caller's device>"

    def limit(self, name: str) -> int:
        return int(self.limits[name])

    def cache(self, name: str) -> dict:
        """A named cache owned by this device (created on first use)."""
        found = self._caches.get(name)
        if found is None:
            found = self._caches[name] = {}
        return found

    def drop_caches(self) -> None:
        self._caches.clear()


_default: DeviceContext | None = None
_contexts: dict[int, DeviceContext] = {}
_lock = threading.Lock()


def get_context(device: Any | None = None) -> DeviceContext:
    """The context for ``device``, or the process-wide default one (created on first call).

    Raises:
        NoAdapterError: no adapter exists (missing Vulkan driver) or the forced one is absent.
    """
    global _default
    with _lock:
        if device is not None:
            if isinstance(device, DeviceContext):
                return device
            ctx = _contexts.get(id(device))
            if ctx is None or ctx.device is not device:
                _forget_lost()
                ctx = _contexts[id(device)] = DeviceContext(device)
            return ctx
        if _default is not None and _default.guard.check():
            # Lost (destroyed, found by a backend, or reported and confirmed by a probe): its
            # caches hold objects of a dead device; the next context starts clean.
            log.warning("engine_plugin device lost (%s); acquiring a new one", _default.guard.reason)
            _default.drop_caches()
            _contexts.pop(id(_default.device), None)
            _default = None
        if _default is None:
            _default = _new_context()
            log.info("engine_plugin device: %s", _default.adapter_name)
        return _default


def is_default(ctx: DeviceContext | None) -> bool:
    """Whether ``ctx`` is the process-wide default context (what ``get_context()`` answers
    now), without making one."""
    return ctx is not None and ctx is _default


def _forget_lost() -> None:
    """Drop the contexts of devices found lost (destroyed, reset), their caches with them: a
    process handed device after device kept every one alive, pools and pipelines included,
    about 20 MB a device (review helper 161). Holders of their objects keep getting
    DeviceLostError; a lost device is never handed out again."""
    for key, ctx in list(_contexts.items()):
        if ctx is not _default and ctx.guard.lost:
            ctx.drop_caches()
            _contexts.pop(key, None)


def _new_context(adapter: Any = None) -> DeviceContext:
    """A new device (on ``adapter``, default: the one :func:`_pick_adapter` chooses), registered."""
    adapter = adapter if adapter is not None else _pick_adapter()
    limits = {}
    for name in _RAISED_LIMITS:
        if name in adapter.limits:
            limits[name] = adapter.limits[name]
    # Linear sampling of 32-bit float textures (lavapipe and desktop GPUs have it).
    features = [f for f in _WANTED_FEATURES if f in adapter.features]
    dev = adapter.request_device_sync(required_features=features, required_limits=limits, label="engine_plugin")
    install_poller(dev, fresh=True)  # made here: no map can be pending on it yet
    ctx = DeviceContext(dev, adapter)
    _contexts[id(dev)] = ctx
    return ctx


def fresh_context(avoid: Any = None) -> DeviceContext:
    """A context on a healthy device other than ``avoid`` (a device or DeviceContext that
    faulted, or a collection of them): the default one when it is neither lost nor ``avoid``, else a new private device
    (the default stays what it is for its other users; a lost default is replaced).

    Raises:
        NoAdapterError: no adapter exists.
    """
    many = avoid if isinstance(avoid, (set, frozenset, list, tuple)) else (avoid,)
    bad = [getattr(a, "device", a) for a in many if a is not None]

    def is_bad(device: Any) -> bool:
        return any(device is b for b in bad)

    ctx = get_context()
    if not is_bad(ctx.device) and not ctx.lost:
        return ctx
    with _lock:
        for spare in _spares:  # one made earlier for the same reason, healthy: no device pile-up
            if not is_bad(spare.device) and not spare.guard.check():
                return spare
        made = _new_context(ctx.adapter)
        _spares[:] = [s for s in _spares if not s.lost][-1:] + [made]
    log.info("engine_plugin: a new device on %s (the previous one faulted)", made.adapter_name)
    return made


_spares: list[DeviceContext] = []  # private devices fresh_context made (at most two kept)


def reset_default_context() -> None:
    """Forget the default device (after loss); the next ``get_context()`` makes a new one."""
    global _default
    with _lock:
        if _default is not None:
            _default.lost = True
            _default.drop_caches()
            _contexts.pop(id(_default.device), None)
        _default = None
