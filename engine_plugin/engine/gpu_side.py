"""The GPU side of the :class:`~engine_plugin.engine.Engine`: choosing and adopting a backend,
mirroring fields, registering products (and re-registering them under new generations),
noticing a lost device once, acquiring a new backend after a loss, and the frame-pacing
counts of readbacks still in flight.

An object the engine owns (:class:`GpuSide`); it owns the backend, its device context, the
mirrored, kept and kernel-written field sets, the GPU fault message and the pacing counters.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import DeviceLostError, NoAdapterError, PluginError
from ..gpu.backend import NoGpuBackend, ReadbackResult, ResourceBackend
from ..gpu.descriptors import ReadbackPolicy, coalesce_uploads, field_mirror_desc
from ..lowering import resolve_spec
from ..world import World
from .contract import ProductError
from .products import Product
from .stats import FrameStats

__all__ = ["GpuSide"]

REATTACH_MAX_WAIT = 64  # frames between tries of a product whose field's upload keeps being refused

log = logging.getLogger("engine_plugin.engine")

_SELECTIONS = (ReadbackPolicy.SELECTED_TILES, ReadbackPolicy.SELECTED_PATH)


class GpuSide:
    """Backend choice, field mirrors, GPU registration of products, loss reporting, a new
    backend after a loss, and pacing.

    Args:
        world: the authoritative CPU data.
        config: the engine's :class:`~engine_plugin.engine.EngineConfig`.
        products: the engine's registered products in order (iterated, never changed here).
        engine_params: the engine-filled kernel params of the world (read only).
        on_readback: the callback every product's readbacks complete through.
        backend: the backend to use; default: a ``WgpuBackend`` on ``device`` when one
            exists, else ``NoGpuBackend`` (made, and so closed, by this object's owner).
        device: the device (or DeviceContext) for the default backend.
    """

    def __init__(
        self,
        world: Any,
        config: Any,
        products: Sequence[Product],
        engine_params: Mapping[str, Any],
        on_readback: Callable[[ReadbackResult], None],
        backend: Any = None,
        device: Any = None,
        dirty_token: int | None = None,
    ) -> None:
        self._world = world
        self._faulted: weakref.WeakSet = weakref.WeakSet()  # devices of backends that faulted here: never offered again
        self.dirty_token = dirty_token  # the engine's own dirty flags (World.claim_dirty), if not the world's
        self._config = config
        self._products = products
        self._engine_params = engine_params
        self._on_readback = on_readback
        self._ctx: Any = None
        self.owns_backend = backend is None
        self._resource_backend: tuple[Any, bool] | None = None  # (backend, whether it is a ResourceBackend)
        self.backend: Any = backend if backend is not None else self._make_backend(device)
        self._mirrored: set[str] = set()
        self.upload_refused: dict[str, str] = {}  # field -> why its whole-mirror upload was last refused
        # Fields mirrored on request (field_buffer), product or not: a dict, so uploads go in the
        # order of the requests whatever PYTHONHASHSEED is (a set iterates in hash order).
        self._kept: dict[str, None] = {}
        self._kernel_written: set[str] = set()  # kept fields never gap-coalesced (field_buffer(kernel_writes=True))
        self._dropped: set[str] = set()  # kernel-written mirrors a refused upload took off this backend (see mirror)
        self._frame_readbacks: dict[int, int] = {}  # frame -> its readbacks not delivered yet (pacing)
        self.fault: str | None = None
        self._adopt_context()

    # ---- backend -----------------------------------------------------------------------

    def _make_backend(self, device: Any) -> Any:
        try:
            from ..device.context import get_context
            from ..gpu.wgpu_backend import WgpuBackend

            ctx = get_context(device)
            return WgpuBackend(ctx, self._config.backend)
        except (NoAdapterError, ImportError, OSError) as exc:
            log.info("no GPU (%s); products run on their CPU fallbacks", exc)
            return NoGpuBackend()

    def _adopt_context(self) -> None:
        be = self.backend
        self._ctx = None
        if self.resource_backend:
            from ..device.context import get_context

            self._ctx = getattr(be, "context", None) or get_context(be.device)

    @property
    def resource_backend(self) -> bool:
        """Whether the backend takes engine-made wgpu resources: a WgpuBackend or anything that
        implements the whole :class:`~engine_plugin.gpu.backend.ResourceBackend` boundary."""
        be = self.backend
        known = self._resource_backend
        if known is None or known[0] is not be:
            # A runtime-checkable Protocol's isinstance checks every member (~60 µs); the
            # answer for one backend object does not change, and a frame asks several times.
            known = self._resource_backend = (be, isinstance(be, ResourceBackend))
        return known[1]

    @property
    def active(self) -> bool:
        """Whether products can run on the GPU now (a healthy resource backend)."""
        if not self.resource_backend:
            return False
        healthy = getattr(self.backend, "healthy", None)
        return bool(healthy) if healthy is not None else self.backend.capabilities().usable

    def acquire(self, device: Any = None) -> Any | None:
        """A new healthy ``WgpuBackend`` to replace the current one (after a loss), or None
        (logged). A faulted backend's device is never offered again.

        Args:
            device: the device (or DeviceContext) to use; default: the current context while
                it is healthy, else a fresh one.
        """
        from ..device.context import fresh_context, get_context
        from ..gpu.wgpu_backend import WgpuBackend

        old = self.backend
        # A faulted backend's device is never used again: after notify_device_error it may look
        # healthy (not lost) while the application knows it is not.
        faulted = self.resource_backend and (not getattr(old, "healthy", True) or getattr(old, "lost", False))
        dead = getattr(old, "device", None) if faulted else None
        if dead is not None:
            self._faulted.add(dead)
        try:
            ctx = get_context(device) if device is not None else None
            if ctx is not None and (ctx.lost or ctx.device in self._faulted):
                log.warning("recover_gpu: the device offered is a faulted one; acquiring another")
                ctx = None
            chosen = device is not None and ctx is not None
            if ctx is None:
                current = self._ctx
                healthy = current is not None and not current.lost and not faulted and current.device not in self._faulted
                ctx = current if healthy else fresh_context(avoid=tuple(self._faulted))
            backend = WgpuBackend(ctx, self._config.backend)
            if not backend.healthy and not chosen and ctx.guard.probe_lost():
                # A device lost without anyone telling its guard (a reset): marked, and one
                # other device tried (recover_gpu answered False, and a second call worked).
                ctx.guard.mark_lost("found lost by recover_gpu (probed)")
                backend.close()
                backend = WgpuBackend(fresh_context(avoid=(ctx, *self._faulted)), self._config.backend)
        except (NoAdapterError, ImportError) as exc:
            log.warning("recover_gpu: no device (%s); products stay on the CPU", exc)
            return None
        if not backend.healthy:
            log.warning("recover_gpu: the new backend is disabled (%s)", backend.fault)
            backend.close()
            return None
        return backend

    def close_backend(self) -> None:
        """Close the current backend (its pending readbacks fail through their callbacks)."""
        try:
            self.backend.close()
        except Exception as exc:  # a lost device may complain while closing; it is gone anyway
            log.debug("closing the old backend: %s", exc)

    def adopt(self, backend: Any) -> None:
        """Use ``backend`` (made here, so owned) from now on: no field is mirrored on it yet,
        no fault, and no readback in flight (the old backend's all failed when it closed)."""
        self.backend = backend
        self.owns_backend = True
        self._mirrored.clear()
        self._dropped.clear()  # recover_gpu owes every writer and reader of a kernel-written mirror anew
        self.upload_refused.clear()
        for product in self._products:  # a new backend: refusals of the old one do not count (review helper 211)
            product.reattach_wait = product.reattach_backoff = 0
        self._adopt_context()
        self.fault = None
        self._frame_readbacks.clear()

    @property
    def adapter_name(self) -> str:
        return getattr(self._ctx, "adapter_name", "a device")

    # ---- fields ------------------------------------------------------------------------

    def keep(self, name: str, *, kernel_writes: bool = False) -> None:
        """Mirror field ``name`` on request from now on (``Engine.field_buffer``)."""
        self._kept.setdefault(name, None)
        if kernel_writes:
            self._kernel_written.add(name)

    def note_kernel_writes(self, names: Any) -> None:
        """Fields a kernel writes into: their uploads are never gap-coalesced."""
        self._kernel_written.update(names)

    @property
    def kept(self) -> list[str]:
        """The fields kept on request, in the order of the requests."""
        return list(self._kept)

    def mirrored(self, name: str) -> bool:
        return name in self._mirrored

    def kernel_written(self, name: str) -> bool:
        return name in self._kernel_written

    def mirror(self, name: str) -> bool:
        """Register field ``name``'s mirror (once per backend) and upload all of it."""
        if name in self._mirrored:
            return True
        world = self._world
        if not self.backend.register_field(field_mirror_desc(world, name)):
            log.warning("field %r has no GPU mirror (%s); its products run on the CPU", name, getattr(self.backend, "last_refusal", "refused"))
            return False
        # Dirty chunks go up with the next frame's uploads anyway; send the rest now, under the
        # world's lock (an RLock: a frame holds it already) so another thread's add, evict or
        # write cannot land between listing the clean chunks and uploading their spans.
        token = self.dirty_token
        # Only a World's lock: another world's may be a plain Lock its own methods take.
        with world.lock if isinstance(world, World) else contextlib.nullcontext():
            clean = [k for k in world.keys() if not (world.is_dirty(k, name) if token is None else world.is_dirty(k, name, consumer=token))]
            for desc in coalesce_uploads(world, name, clean):
                if not self.backend.upload(desc):
                    if hasattr(self.backend, "unregister_field"):
                        self.backend.unregister_field(name)
                    why = getattr(self.backend, "last_refusal", "refused")
                    # Said once an episode (product_error says it meanwhile); the tries that follow it quietly.
                    (log.debug if name in self.upload_refused else log.warning)("field %r cannot be uploaded (%s); its products run on the CPU", name, why)
                    self.upload_refused[name] = str(why)
                    return False
        self._mirrored.add(name)
        self.upload_refused.pop(name, None)
        if name in self._dropped:
            self._dropped.discard(name)
            self._rebuilt(name)
        return True

    def _rebuilt(self, name: str) -> None:
        """Kernel-written mirror ``name`` came back holding the world's bytes, not what its
        writers' kernels wrote: every chunk each writer covers is unwritten on the GPU
        (``mirror_unwritten``), so its readers wait and the writer, on the GPU again, writes
        them (``owe_unwritten``), as after recover_gpu(). Left so, a reader back first read the
        world's bytes (review helper 236: 0.0 applied for a chunk that never changed)."""
        live = set(self._world.keys())
        for product in self._products:
            if product.plan is not None and name in product.plan.written_fields:
                keys = set(live)
                if product.policy in _SELECTIONS:
                    keys &= product.selection_keys  # it writes only what it selects
                product.mirror_unwritten |= keys

    def unmirror(self, name: str) -> None:
        """A refused upload left field ``name``'s mirror behind the world: its products leave
        the GPU (their fallbacks serve them) until the GPU is recovered."""
        self._mirrored.discard(name)
        if name in self._kernel_written:
            self._dropped.add(name)  # what its kernels wrote is lost with it
        if hasattr(self.backend, "unregister_field"):
            self.backend.unregister_field(name)
        log.warning("an upload of field %r was refused (%s); its products run on the CPU", name, getattr(self.backend, "last_refusal", "refused"))
        for product in self._products:
            if name in product.field_names and product.gpu is not None:
                self.release(product)
                product.detached = True  # back on the GPU next frame (Engine._reattach)

    # ---- GPU registration ------------------------------------------------------------

    def _capacity(self, product: Product) -> int:
        world = self._world
        if product.tile_work:  # FULL_FIELD, or NONE over a `tiles` work list: one item a tile
            return world.max_chunks * world.tiles_per_chunk
        if product.policy in _SELECTIONS:
            need = max(self._config.min_selection_capacity, len(product.selection))
            return 1 << (need - 1).bit_length()
        return world.max_chunks

    def register(self, product: Product) -> bool:
        """Mirror the product's fields, compile its variant on this device, register it."""
        from .gpu_product import GpuProduct

        if product.gave_up:
            return False  # its readbacks kept failing: the CPU serves it until recover_gpu()
        for name in product.field_names:
            if not self.mirror(name):
                refused = self.upload_refused.get(name)
                if refused is not None:
                    # An upload refused again (the mirror's whole upload as it came back): tried
                    # again next frame, and said while it is off the GPU. Left there, the product
                    # stayed on its fallback for good with no error, and a mirror reader behind
                    # it kept a stale result (review helper 207).
                    product.detached = True
                    product.reattach_backoff = min(max(1, 2 * product.reattach_backoff), REATTACH_MAX_WAIT)
                    product.reattach_wait = product.reattach_backoff
                    product.off_gpu(
                        ProductError(
                            f"product {product.key!r} runs on its CPU fallback: the upload of its field {name!r} was refused ({refused}); "
                            f"it goes back to the GPU once an upload is taken (tried again in {product.reattach_backoff} frame(s), then less and less often, "
                            "or at once when another product mirrors the field)"
                        )
                    )
                return False
        assert product.plan is not None, "a product's plan is checked at registration"
        program = self._program_here(product.kernel)
        # The planned variant, asked as a VariantSpec: a dict would mark every value of it as
        # asked for by name, and a save dropping a value the product only defaulted to was then
        # refused (review helper 236). The names the product's caller gave stay explicit.
        spec = resolve_spec(program.schema, product.spec_values or None)
        variant = program.variant(spec, product.columns)
        if product.spec:
            program.mark_explicit(variant.spec, product.spec)
        gpu = GpuProduct.create(
            self.backend,
            product.key,
            variant,
            product.plan,
            self._capacity(product),  # type: ignore[arg-type]
            {**self._engine_params_for(product), **product.params},
            self._on_readback,
            product.policy,
            product.inputs,
        )
        if gpu is None:
            log.warning("product %r runs on the CPU: the backend refused it (%s)", product.key, getattr(self.backend, "last_refusal", "refused"))
            return False
        product.gpu = gpu
        product.detached = False  # registered again (by whatever path): nothing left for _reattach
        product.reattach_wait = product.reattach_backoff = 0
        product.dispatch_refusals = 0  # a new registration: refusals of the old one do not count
        product.back_on_gpu()  # why it left the GPU is over (review helper 101)
        if product.kernel_changed_off_gpu:
            # A reload (or new params) landed while a fallback served it: the results an older
            # kernel computed on the GPU before are stale; the new one computes everything.
            product.kernel_changed_off_gpu = False
            product.owe_everything(self._world)
        return True

    def _engine_params_for(self, product: Product) -> dict[str, Any]:
        if product.plan is None:
            return {}
        return {**{n: self._engine_params[n] for n in product.plan.engine_params}, **dict(product.plan.slot_params)}

    def _program_here(self, program: Any) -> Any:
        """``program`` on the backend's device (a reference's program lives on its library's)."""
        if program.ctx is self._ctx:
            return program
        on_device = getattr(program, "on_device", None)
        if on_device is not None:
            return on_device(self._ctx)  # modules and store included (an #import resolves there too)
        from ..runtime.program import program as make_program

        return make_program(program.key, program.schema, program.wgsl, wgsl_path=program.wgsl_path, device=self._ctx)

    def release(self, product: Product) -> None:
        """Release the product's GPU registration (its late results become stale)."""
        if product.gpu is not None:
            product.gpu.release()
            product.gpu = None

    def reregister(self, product: Product) -> None:
        """A new GPU generation for ``product`` (late results of the old one become stale).

        A kernel that fails to compile here leaves the product on its CPU fallback (logged).
        """
        was_gpu = product.gpu is not None
        self.release(product)
        if product.program is not None and self.active:
            try:
                self.register(product)
            except PluginError as exc:
                product.fail(exc, off_gpu=True)
                log.warning("product %r runs on the CPU: re-registering it failed:\n%s", product.key, exc)
        if was_gpu or product.gpu is not None or product.program is None:
            # New kernel, params or buffers: everything is recomputed. A product served by its
            # CPU fallback before and after is not: the fallback's results do not depend on the
            # kernel's text, and computing the same content again would apply it twice (a new
            # kernel's owes it once it is on the GPU again: ``kernel_changed_off_gpu``).
            product.owe_everything(self._world)

    def check(self, st: FrameStats) -> None:
        """Report a lost or disabled GPU once; its products continue on their fallbacks.

        While it lasts, every product off the GPU without another error answers the loss in
        ``product_error()``, wherever the loss was met (an upload, a readback, the guard: it
        answered None) and whenever it came to lack one (a reload applied, a product
        registered meanwhile: helper 121); recover_gpu() clears it."""
        if not self.resource_backend or (self.fault is None and self.active):
            return
        if self.fault is None:
            self.fault = getattr(self.backend, "fault", None) or "the GPU backend is disabled"
            st.gpu_lost = True
            for product in self._products:
                product.gpu = None  # its registration died with the backend
            log.warning("GPU unavailable (%s): products continue on their CPU fallbacks; engine.recover_gpu() re-acquires a device", self.fault)
        lost = None
        for product in self._products:
            if product.exception is None and product.gpu is None:
                if lost is None:
                    lost = DeviceLostError(f"the GPU is unavailable ({self.fault}); the product runs on its CPU fallback until engine.recover_gpu()")
                product.fail(lost, off_gpu=True)

    # ---- pacing ------------------------------------------------------------------------

    def readback_requested(self, frame: int) -> None:
        """A readback of ``frame``'s work was accepted: that frame is in flight until it lands."""
        self._frame_readbacks[frame] = self._frame_readbacks.get(frame, 0) + 1

    def readback_landed(self, frame: int) -> None:
        """A readback of ``frame``'s work completed (delivered or failed)."""
        left = self._frame_readbacks.get(frame, 0) - 1  # pacing: that frame's work is over
        if left > 0:
            self._frame_readbacks[frame] = left
        else:
            self._frame_readbacks.pop(frame, None)

    @property
    def frames_in_flight(self) -> int:
        """Frames whose GPU readbacks are still outstanding."""
        return len(self._frame_readbacks)
