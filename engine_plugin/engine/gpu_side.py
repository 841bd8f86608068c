"""The GPU side of the :class:`~engine_plugin.engine.Engine`: choosing a backend, mirroring
fields, registering products (and re-registering them under new generations), noticing a
lost device once, and recovering from it.

A mixin of ``Engine`` (it uses the engine's ``world``, ``backend``, ``config`` and products);
split from ``engine.py`` to keep each module about one thing.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import NoAdapterError, PluginError
from ..gpu.backend import NoGpuBackend, ResourceBackend
from ..gpu.descriptors import ReadbackPolicy, coalesce_uploads, field_mirror_desc
from .products import InFlight, Product
from .stats import FrameStats

__all__ = ["GpuSide"]

log = logging.getLogger("engine_plugin.engine")

_SELECTIONS = (ReadbackPolicy.SELECTED_TILES, ReadbackPolicy.SELECTED_PATH)


class GpuSide:
    """Backend choice, GPU registration of products, loss reporting and recovery."""

    world: Any
    backend: Any
    _on_readback: Any  # Delivery's (the engine is both)
    config: Any
    gpu_fault: str | None
    _ctx: Any
    _order: list[Product]
    _mirrored: set[str]
    _completed: list
    _engine_params: dict[str, Any]
    _owns_backend: bool
    _frame_readbacks: dict[int, int]

    # ---- backend -----------------------------------------------------------------------

    def _make_backend(self, device: Any) -> Any:
        try:
            from ..device.context import get_context
            from ..gpu.wgpu_backend import WgpuBackend

            ctx = get_context(device)
            return WgpuBackend(ctx, self.config.backend)
        except (NoAdapterError, ImportError, OSError) as exc:
            log.info("no GPU (%s); products run on their CPU fallbacks", exc)
            return NoGpuBackend()

    def _adopt_backend(self) -> None:
        be = self.backend
        self._ctx = None
        if self._resource_backend:
            from ..device.context import get_context

            self._ctx = getattr(be, "context", None) or get_context(be.device)

    @property
    def _resource_backend(self) -> bool:
        """Whether the backend takes engine-made wgpu resources: a WgpuBackend or anything that
        implements the whole :class:`~engine_plugin.gpu.backend.ResourceBackend` boundary."""
        return isinstance(self.backend, ResourceBackend)

    @property
    def gpu_active(self) -> bool:
        """Whether products can run on the GPU now (a healthy resource backend)."""
        if not self._resource_backend:
            return False
        healthy = getattr(self.backend, "healthy", None)
        return bool(healthy) if healthy is not None else self.backend.capabilities().usable

    # ---- GPU registration ------------------------------------------------------------

    def _capacity(self, product: Product) -> int:
        world = self.world
        if product.tile_work:  # FULL_FIELD, or NONE over a `tiles` work list: one item a tile
            return world.max_chunks * world.tiles_per_chunk
        if product.policy in _SELECTIONS:
            need = max(self.config.min_selection_capacity, len(product.selection))
            return 1 << (need - 1).bit_length()
        return world.max_chunks

    def _register_gpu(self, product: Product) -> bool:
        """Mirror the product's fields, compile its variant on this device, register it."""
        from .gpu_product import GpuProduct

        if product.gave_up:
            return False  # its readbacks kept failing: the CPU serves it until recover_gpu()
        for name in product.field_names:
            if not self._mirror(name):
                return False
        assert product.plan is not None, "a product's plan is checked at registration"
        program = self._program_here(product.program)
        variant = program.variant(product.spec_values or None, product.columns)
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
        return True

    def _engine_params_for(self, product: Product) -> dict[str, Any]:
        names = product.plan.engine_params if product.plan is not None else ()
        return {n: self._engine_params[n] for n in names}

    def _program_here(self, program: Any) -> Any:
        """``program`` on the backend's device (a reference's program lives on its library's)."""
        if program.ctx is self._ctx:
            return program
        from ..runtime.program import program as make_program

        return make_program(program.key, program.schema, program.wgsl, wgsl_path=program.wgsl_path, device=self._ctx)

    def _mirror(self, name: str) -> bool:
        """Register field ``name``'s mirror (once per backend) and upload all of it."""
        if name in self._mirrored:
            return True
        if not self.backend.register_field(field_mirror_desc(self.world, name)):
            log.warning("field %r has no GPU mirror (%s); its products run on the CPU", name, getattr(self.backend, "last_refusal", "refused"))
            return False
        # Dirty chunks go up with the next frame's uploads anyway; send the rest now.
        clean = [k for k in self.world.keys() if not self.world.is_dirty(k, name)]
        for desc in coalesce_uploads(self.world, name, clean):
            if not self.backend.upload(desc):
                if hasattr(self.backend, "unregister_field"):
                    self.backend.unregister_field(name)
                log.warning("field %r cannot be uploaded (%s); its products run on the CPU", name, getattr(self.backend, "last_refusal", "refused"))
                return False
        self._mirrored.add(name)
        return True

    def _unmirror(self, name: str) -> None:
        """A refused upload left field ``name``'s mirror behind the world: its products leave
        the GPU (their fallbacks serve them) until the GPU is recovered."""
        self._mirrored.discard(name)
        if hasattr(self.backend, "unregister_field"):
            self.backend.unregister_field(name)
        log.warning("an upload of field %r was refused (%s); its products run on the CPU", name, getattr(self.backend, "last_refusal", "refused"))
        for product in self._order:
            if name in product.field_names and product.gpu is not None:
                self._release_gpu(product)
                product.detached = True  # back on the GPU next frame (Engine._reattach)

    def _release_gpu(self, product: Product) -> None:
        if product.gpu is not None:
            product.gpu.release()
            product.gpu = None

    def _reregister(self, product: Product) -> None:
        """A new GPU generation for ``product`` (late results of the old one become stale).

        A kernel that fails to compile here leaves the product on its CPU fallback (logged).
        """
        was_gpu = product.gpu is not None
        self._release_gpu(product)
        if product.program is not None and self.gpu_active:
            try:
                self._register_gpu(product)
            except PluginError as exc:
                product.fail(exc)
                log.warning("product %r runs on the CPU: re-registering it failed:\n%s", product.key, exc)
        if was_gpu or product.gpu is not None or product.program is None:
            # New kernel, params or buffers: everything is recomputed. A product served by its
            # CPU fallback before and after is not: the fallback's results do not depend on the
            # kernel's text, and computing the same content again would apply it twice.
            product.owe_everything(self.world)

    def _check_gpu(self, st: FrameStats) -> None:
        """Report a lost or disabled GPU once; its products continue on their fallbacks."""
        if self.gpu_fault is not None or not self._resource_backend or self.gpu_active:
            return
        self.gpu_fault = getattr(self.backend, "fault", None) or "the GPU backend is disabled"
        st.gpu_lost = True
        for product in self._order:
            product.gpu = None  # its registration died with the backend
        log.warning("GPU unavailable (%s): products continue on their CPU fallbacks; engine.recover_gpu() re-acquires a device", self.gpu_fault)

    # ---- device loss -------------------------------------------------------------------

    def recover_gpu(self, device: Any = None) -> bool:
        """Re-acquire a device after a loss (or a first one for a CPU-only engine), re-mirror
        the fields and re-register every product under new generations.

        Args:
            device: the device (or DeviceContext) to use; default: the process's default
                device, made anew when the old one was lost. The old backend is closed (its
                pending readbacks fail; their chunks are owed again).
        Returns:
            whether products run on the GPU again.
        """
        from ..device.context import fresh_context, get_context
        from ..gpu.wgpu_backend import WgpuBackend

        old = self.backend
        # A faulted backend's device is never used again: after notify_device_error it may look
        # healthy (not lost) while the application knows it is not.
        faulted = self._resource_backend and (not getattr(old, "healthy", True) or getattr(old, "lost", False))
        dead = getattr(old, "device", None) if faulted else None
        try:
            ctx = get_context(device) if device is not None else None
            if ctx is not None and (ctx.lost or (dead is not None and ctx.device is dead)):
                log.warning("recover_gpu: the device offered is the faulted one; acquiring another")
                ctx = None
            if ctx is None:
                current = self._ctx
                healthy = current is not None and not current.lost and not faulted
                ctx = current if healthy else fresh_context(avoid=dead)
            backend = WgpuBackend(ctx, self.config.backend)
        except (NoAdapterError, ImportError) as exc:
            log.warning("recover_gpu: no device (%s); products stay on the CPU", exc)
            return False
        if not backend.healthy:
            log.warning("recover_gpu: the new backend is disabled (%s)", backend.fault)
            backend.close()
            return False
        for product in self._order:
            product.gpu = None
        try:
            old.close()  # fails what is pending; their callbacks land in _completed
        except Exception as exc:  # a lost device may complain while closing; it is gone anyway
            log.debug("closing the old backend: %s", exc)
        for result, _ in self._completed:
            inflight: InFlight = result.desc.user
            inflight.product.inflight = max(0, inflight.product.inflight - 1)
            inflight.product.reowe(self.world, inflight.work.keys, failed=inflight.work)
        self._completed.clear()
        self.backend = backend
        self._owns_backend = True
        self._mirrored.clear()
        self._adopt_backend()
        self.gpu_fault = None
        self._frame_readbacks.clear()  # the old backend's readbacks were all failed above
        for product in self._order:
            product.inflight = 0
            product.gave_up = product.detached = False
            product.readback_failures = 0
            if product.program is not None:
                try:
                    self._register_gpu(product)
                except PluginError as exc:  # this product stays on its fallback; the others go on
                    product.fail(exc)
                    log.warning("recover_gpu: product %r stays on the CPU:\n%s", product.key, exc)
        log.info("GPU recovered on %s; %d product(s) re-registered", getattr(ctx, "adapter_name", "a device"), sum(p.gpu is not None for p in self._order))
        return self.gpu_active
