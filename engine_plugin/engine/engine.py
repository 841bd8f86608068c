"""The per-frame engine loop (SPEC section 4): uploads, generation-checked products,
revalidated asynchronous readbacks, CPU fallbacks.

    engine = Engine(world, library)                  # WgpuBackend when a device exists
    h = engine.register_product("engine/summary.computeShader", spec={"T": "f32"},
                                fields={"src": "height"}, policy=ReadbackPolicy.SUMMARY,
                                apply=on_summary, cpu_fallback=fallbacks.summary)
    while running:
        game.update(world)                           # world.write / set_tile / edit / evict
        stats = engine.frame()                       # never waits for the GPU

``frame()`` runs SPEC's six steps in order: (1) finished hot reloads re-register their
products under a new generation; (2) dirty chunk fields upload through coalesced upload
descriptors; (3) every product with work dispatches over the chunks it owes results for;
(4) each dispatch requests its readback (bounded, asynchronous); (5) completed readbacks are
applied only where the generation is live and each chunk still has the version it was
uploaded at, the rest discarded and counted; (6) the CPU fallback runs wherever the backend
refused. GPU results are derived data: a fallback computes the same records from the
authoritative world.

A product owes results for a chunk from the moment one of its input fields changes (or it
is added, or the product's program changes) until results computed from that content are
applied. Stale results re-owe their chunk, so nothing is lost and nothing stale is applied.

Delivery rules (issue 14), each held by a test and by the model-based fuzzer:

* a result is applied at most once per (product generation, chunk, content version): a
  content version already computed is not owed again (an ``apply`` that edits the world);
* nothing owed is lost without a report: results discarded because their registration went
  away under them (a refused upload, a reload) owe their chunks again; a product whose
  chunks stop changing gets a current result within a bounded number of frames, or shows why
  not (``engine.idle`` false, ``product.error``);
* work past ``max_chunks_per_dispatch`` or the readback byte budget is split across
  dispatches and frames; a refused upload takes a product off the GPU for one frame only;
* a failing readback is retried ``max_readback_failures`` times, then the CPU serves the
  product (logged once, ``FrameStats.readback_fallbacks``);
* pacing: at most ``max_frames_in_flight`` frames of GPU work are outstanding; further owed
  work waits (``FrameStats.deferred``), so ``frame()`` never waits for the GPU.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import re
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DeviceLostError, PluginError, Span, StaleHandleError, StaleSpanError
from ..gpu.backend import ReadbackResult, upload_spans
from ..gpu.config import WgpuBackendConfig
from ..gpu.descriptors import ReadbackDesc, ReadbackPolicy, UploadDesc, spans_nbytes, take_dirty_changes
from ..gpu.handles import GpuProductHandle, SlotTable
from ..lowering import resolve_spec
from ..runtime.batch import flush_current_batch
from ..runtime.params import ParamsPacker
from ..world import World
from .contract import ENGINE_PARAMS, ProductError, ProductResult, ProductWork, engine_param_values, plan_product
from .delivery import Delivery
from .gpu_side import GpuSide
from .products import ChunkIndex, InFlight, Product, held_values
from .records import readback_extent
from .selection import normalize_tiles, path_tiles
from .stats import FrameStats

__all__ = ["Engine", "EngineConfig"]

log = logging.getLogger("engine_plugin.engine")


class ReadbackBudgetError(ProductError):
    """A product's readback can never be taken: more than the backend's whole readback byte
    budget, or a ``FULL_FIELD`` readback the backend does not allow."""


@dataclass(frozen=True)
class EngineConfig:
    """Settings of an :class:`Engine`.

    Attributes:
        backend: budgets of the WgpuBackend the engine makes (``allow_full_field=True`` opts in
            to ``FULL_FIELD`` readbacks).
        max_products: registered products at once.
        min_selection_capacity: work items a selection product's buffers hold at least (they
            grow, with a re-registration, when a selection outgrows them).
        upload_gap_bytes: join dirty runs of a field separated by at most this many clean
            bytes into one write (the clean chunks between are re-sent as they are): a
            ``write_buffer`` call costs ~5-10 us of host time in wgpu-py, about what copying
            32-64 KiB costs. 0 writes dirty runs only.
        revalidate: ``"chunk"`` (SPEC section 4): a result is applied only while its chunk
            keeps the content version it was uploaded at. ``"fields"``: only while none of
            the fields the product reads changed since; a game rewriting another field of the
            chunk every frame then does not starve the product. Equally safe: the result is
            derived from exactly those fields. A product whose kernel writes a mirror is
            revalidated by its fields either way: running it again over a chunk whose result
            was discarded would apply its write twice.
        max_frames_in_flight: frames whose GPU readbacks are still outstanding before the next
            frame's dispatches are deferred (counted in ``FrameStats.deferred``), so ``frame()``
            never waits for the GPU. A backend whose ``queue.submit`` waits for the previous
            submission (``serial_submits``: lavapipe) is held to 1.
        max_dispatches_per_product: dispatches one product may make in one frame when its work
            is split (work past ``max_chunks_per_dispatch`` or the readback byte budget is split
            into bounded dispatches across frames, never refused whole).
        max_readback_failures: failed readbacks in a row after which a product leaves the GPU
            for its CPU fallback (logged once, counted in ``FrameStats.readback_fallbacks``)
            until :meth:`Engine.recover_gpu`.
    """

    backend: WgpuBackendConfig | None = None
    max_products: int = 256
    min_selection_capacity: int = 64
    upload_gap_bytes: int = 64 * 1024
    revalidate: str = "chunk"
    max_frames_in_flight: int = 2
    max_dispatches_per_product: int = 4
    max_readback_failures: int = 3

    def __post_init__(self) -> None:
        if self.revalidate not in ("chunk", "fields"):
            raise ProductError(f"EngineConfig.revalidate is 'chunk' or 'fields', not {self.revalidate!r}")
        for name in ("max_frames_in_flight", "max_dispatches_per_product", "max_readback_failures"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ProductError(f"EngineConfig.{name} must be a positive int, not {v!r}")


class Engine:
    """Runs registered products over a :class:`~engine_plugin.world.World` once a frame.

    Args:
        world: the authoritative CPU data.
        library: an :class:`~engine_plugin.assets.AssetLibrary` (products may then be named by
            asset path; the engine applies its finished reloads each frame). Libraries of
            references passed to :meth:`register_product` are polled too.
        backend: a :class:`~engine_plugin.gpu.GpuBackend`; default: a ``WgpuBackend`` on the
            default device when one exists, else ``NoGpuBackend`` (everything on the CPU).
        config: budgets and settings.
        device: the device (or DeviceContext) for the default backend.

    Calls are made on one thread (the engine thread), like the backend's.

    The engine composes two objects it owns: a :class:`~.gpu_side.GpuSide` (the backend,
    field mirrors, GPU registrations, loss, pacing) and a :class:`~.delivery.Delivery`
    (completed readbacks, revalidation, ``apply`` calls, CPU fallbacks); it keeps the product
    table and runs the frame over both.
    """

    def __init__(self, world: Any, library: Any = None, backend: Any = None, *, config: EngineConfig | None = None, device: Any = None) -> None:
        self.world = world
        # Only World's own lock: another world's ``lock`` may be a plain Lock its own methods
        # take (a frame holding it would deadlock on them). Such a world is the engine
        # thread's alone (SPEC section 4).
        self._world_lock: Any = world.lock if isinstance(world, World) else contextlib.nullcontext()
        self.library = library
        self.config = config or EngineConfig()
        if device is None and library is not None:
            device = getattr(library, "device", None)  # the library compiles for its device
        self._products: SlotTable[Product] = SlotTable(self.config.max_products)
        self._order: list[Product] = []
        self._frame = 0
        self._engine_params = engine_param_values(world)
        self.totals = FrameStats()
        # Dirty flags this engine takes: the world's own, or (a second engine on the world) a
        # set of its own, so neither engine's uploads hide a change from the other's mirrors.
        self._claims = _takes_consumer(world) and hasattr(world, "claim_dirty")
        self._dirty_token: int | None = world.claim_dirty(self) if self._claims else None
        self._dirty_released = False
        self._parked: int | None = None  # flags parked at close(): what the world changes meanwhile
        # Whether a product may be waiting for a readback slot (set each frame before the
        # dispatches, and when one starts waiting): while not, no slot is owed to anyone.
        self._slot_waiting = False
        self._writers: dict[str, list[Product]] = {}  # mirror -> products whose kernels write it (each frame)
        self._position: dict[int, int] = {}  # id(product) -> its place in registration order (each frame)
        self._gpu = GpuSide(world, self.config, self._order, self._engine_params, self._on_readback, backend, device, self._dirty_token)
        self._delivery = Delivery(world, self.config, self._products, self._gpu, self._engine_params, self._dirty_token)

    def _on_readback(self, result: ReadbackResult) -> None:
        """Every product's readback callback (inside ``backend.poll``): delivery keeps it."""
        self._delivery.on_readback(result)

    @property
    def backend(self) -> Any:
        """The backend the engine runs products on (a new one after :meth:`recover_gpu`)."""
        return self._gpu.backend

    @property
    def gpu_active(self) -> bool:
        """Whether products can run on the GPU now (a healthy resource backend)."""
        return self._gpu.active

    @property
    def gpu_fault(self) -> str | None:
        """Why the GPU went away (reported once by a frame), or None while it serves."""
        return self._gpu.fault

    @property
    def inflight(self) -> int:
        """Readbacks requested and not yet delivered (applied, discarded or failed)."""
        return sum(p.inflight for p in self._order)

    @property
    def pending(self) -> int:
        """Chunks products still owe results for (summed over products)."""
        return sum(len(p.pending) for p in self._order)

    @property
    def idle(self) -> bool:
        """Nothing in flight and nothing owed: the products are up to date with the world.

        Owed includes a product detached by a refused upload (back on the GPU next frame) and
        a mirror writer's kernel work over chunks its fallback served (its readers wait for
        it): an engine that read idle then changed its readers' results a frame later."""
        if self.inflight or self.pending or self._delivery.waiting:
            return False
        for p in self._order:
            if p.detached and p.gpu is None and not p.gave_up and self.gpu_active:  # re-registered by the next frame's _reattach
                return False
            refused = p.dispatch_refusals >= DISPATCH_REFUSALS_TO_FALLBACK  # a limit: its fallback serves it for good
            if p.mirror_unwritten and self.gpu_active and (p.gpu is not None or p.detached) and not p.gave_up and not refused:
                return False
        return True

    # ---- registration ----------------------------------------------------------------

    def register_product(
        self,
        source: Any,
        *,
        key: Hashable | None = None,
        spec: Mapping[str, str] | None = None,
        columns: Mapping[str, Sequence[str]] | None = None,
        fields: Mapping[str, str] | Sequence[str] | str | None = None,
        policy: ReadbackPolicy = ReadbackPolicy.SUMMARY,
        apply: Callable[[ProductResult], None] | None = None,
        cpu_fallback: Callable[[Any, ProductWork], Any] | None = None,
        params: Mapping[str, Any] | None = None,
        tiles: Iterable[Any] | None = None,
        path: Sequence[Any] | None = None,
        inputs: Mapping[str, Any] | None = None,
        readback: Sequence[str] | None = None,
    ) -> GpuProductHandle:
        """Register a product; it owes results for every chunk from the next frame on.

        Args:
            source: an asset reference (hot reloadable), an asset path (with ``library``), a
                ``Program``, a ``Variant``, or None for a CPU-only product (``cpu_fallback``
                required, ``fields`` names the fields whose changes it follows).
            key: the product's name (default: the program key and its fields).
            spec, columns: the variant (see ``program.variant``).
            fields: binding -> world field, or world fields in field-input order.
            policy: what is read back (see :class:`~engine_plugin.gpu.ReadbackPolicy`).
            apply: called with each :class:`ProductResult` that is still current.
            cpu_fallback: ``fn(world, work) -> records``, the same contract as the kernel (it
                reads the world and changes nothing: a chunk that changes while it computes
                makes its result stale, and it is computed again next frame).
            params: the kernel's own params (the engine fills ``tile_count`` and friends).
            tiles, path: the selection of a ``SELECTED_TILES`` / ``SELECTED_PATH`` product.
            inputs: bindings supplied once, by name (tables, pages and columns, textures,
                constant buffers; see :mod:`~engine_plugin.engine.contract`).
            readback: the outputs read back (default: every output).
        Raises:
            ProductError: the kernel breaks the product contract, a field or param is wrong.
            SpecializationError, CompileError: from the variant.
        """
        if not isinstance(policy, ReadbackPolicy):
            raise ProductError(f"policy must be a ReadbackPolicy, not {policy!r}")
        ref, program, spec, columns = self._resolve_source(source, spec, columns)
        if program is None and cpu_fallback is None:
            raise ProductError("a product without a kernel (source=None) needs a cpu_fallback")
        if program is None and fields is None:
            raise ProductError("a CPU-only product names the fields it follows: fields=[...]")
        if (tiles is not None and policy is not ReadbackPolicy.SELECTED_TILES) or (path is not None and policy is not ReadbackPolicy.SELECTED_PATH):
            raise ProductError(f"tiles= goes with SELECTED_TILES and path= with SELECTED_PATH, not {policy.name}")
        if key is None:
            base = program.key if program is not None else getattr(cpu_fallback, "__name__", "product")
            names = fields if isinstance(fields, str) else "+".join(fields.values() if isinstance(fields, Mapping) else (fields or ()))
            key = f"{base}({names})" if names else base
        if any(p.key == key for p in self._order):
            raise ProductError(f"a product {key!r} is registered already; pass key= to register another")
        product = Product(
            key=key,
            policy=policy,
            fields=fields,
            apply=apply,
            cpu_fallback=cpu_fallback,
            params=params or {},
            ref=ref,
            program=program,
            spec=spec,
            columns=columns,
            inputs=inputs,
            readback=readback,
        )
        if program is not None:
            self._plan(product, program)  # raises: a broken registration registers nothing
        else:
            self._check_params(product)
        if tiles is not None:
            product.set_selection(normalize_tiles(tiles, self.world.chunk_shape), self.world.chunk_shape)
        elif path is not None:
            product.set_selection(path_tiles(path, self.world.chunk_shape), self.world.chunk_shape)
        handle = self._products.insert(key, product)
        if handle is None:
            raise ProductError(f"max_products={self.config.max_products} products are registered; unregister one")
        product.handle = handle
        product.owe_everything(self.world)
        self._order.append(product)
        if program is not None and self.gpu_active:
            try:
                self._claim_if_released()  # a field's first upload asks the world's dirty flags
                self._gpu.register(product)
            except DeviceLostError as exc:
                # A loss nobody reported yet (a reset met by the compile): the registration is
                # sound, the device is not. Registered as after a loss the engine knew of: its
                # fallback serves it, product_error() answers the loss, recover_gpu() brings it
                # back (it raised, and the product was dropped: review helper 127). Any other
                # error is the registration's own and registers nothing (below).
                self._gpu.release(product)
                product.fail(exc, off_gpu=True)
                log.warning("product %r runs on its CPU fallback: the GPU was lost while it was registered:\n%s", key, exc)
            except BaseException:  # e.g. a CompileError: nothing stays registered
                self.unregister_product(handle)
                raise
        return handle

    def _resolve_source(self, source: Any, spec: Any, columns: Any) -> tuple[Any, Any, Any, Any]:
        """(reference or None, program or None, spec, columns) of a product source."""
        if source is None:
            return None, None, spec, columns
        if isinstance(source, str):
            if self.library is None:
                raise ProductError(f"product {source!r} is an asset path; make the Engine with library=AssetLibrary(...)")
            source = self.library.load(source)
        if hasattr(source, "lowered") and hasattr(source, "compiled"):  # a Variant
            if spec is not None or columns is not None:
                raise ProductError("a Variant is already specialised; pass its program to choose spec/columns")
            return None, source.program, source.spec.as_dict(), source.spec.columns_dict() or None
        if hasattr(source, "on_reload") and callable(getattr(source, "program", None)):  # an asset reference
            return source, source.program(), spec, columns
        if hasattr(source, "variant") and hasattr(source, "schema"):  # a Program
            return None, source, spec, columns
        raise ProductError(f"a product source is an asset reference, asset path, Program or Variant, not {type(source).__name__}")

    def _plan(self, product: Product, program: Any) -> None:
        """Plan ``product`` over ``program``; nothing changes when it does not fit (raises)."""
        vspec = resolve_spec(program.schema, product.spec, product.columns)
        lowered = program.lowered(vspec)
        plan = plan_product(
            lowered, self.world, product.fields_arg, product.policy, program.yaml_path, params=product.params, inputs=product.inputs, readback=product.readback
        )
        self._check_params(product, plan, program=program)
        # The values too, as a run checks them (and whatever device serves, or none): a value
        # refused only when the GPU registers would send the product to its CPU fallback,
        # which would compute with it.
        engine_values = {**{n: self._engine_params[n] for n in plan.engine_params}, **dict(plan.slot_params)}
        ParamsPacker(lowered, program.yaml_path, {p.name: p.line for p in program.schema.params}).check({**engine_values, **product.params})
        # ``program`` answers as its successor after any reload, one the engine refuses too:
        # the product compiles from a pinned view of it (``kernel``), however it re-registers.
        product.plan, product.spec_values = plan, vspec.as_dict()
        if program is not product.kernel:
            pin = getattr(program, "pinned", None)
            product.program, product.kernel = program, (pin() if pin is not None else program)
        # A read_write binding bound to a field writes its mirror: never gap-coalesce over it.
        self._gpu.note_kernel_writes(f.field for f in plan.fields if f.writes)

    def _check_params(self, product: Product, plan: Any = None, params: Mapping[str, Any] | None = None, program: Any = None) -> None:
        plan = plan if plan is not None else product.plan
        program = program if program is not None else product.kernel
        given = set(product.params if params is None else params)
        clash = sorted(given & set(ENGINE_PARAMS))
        if clash:
            raise ProductError(f"param {clash[0]!r} is filled by the engine from the world; leave it out of params=")
        if plan is None:
            return
        unknown = sorted(given - set(plan.user_params))
        if unknown:
            # At its bindings.yaml's params (review helper 229: a save removing a param the
            # product passes was refused naming no file, where one adding a param names its line).
            raise ProductError(f"unknown param {unknown[0]!r}; product {product.key!r} takes: {', '.join(plan.user_params) or 'none'}", _params_span(program))
        missing = [p for p in plan.user_params if p not in given]
        if missing:
            raise ProductError(f"product {product.key!r} needs param {missing[0]!r} (params={{...}})", _param_span(program, missing[0]))

    def unregister_product(self, handle: GpuProductHandle) -> bool:
        """Forget a product. Its readbacks still in flight are discarded when they land."""
        product = self._products.remove(handle)
        if product is None:
            return False
        self._order.remove(product)
        self._gpu.release(product)
        product.pending.clear()
        return True

    def product(self, handle: GpuProductHandle) -> Product:
        """The state of a registered product. Raises StaleHandleError naming the handle."""
        found = self._products.get(handle)
        if found is None:
            raise StaleHandleError(f"{handle} is stale: it was unregistered (or never registered here)")
        return found

    def product_error(self, handle: GpuProductHandle) -> BaseException | None:
        """Why the product runs without its newest kernel or off the GPU, as raised (a
        :class:`~engine_plugin.errors.PluginError` names the user's file, line and column:
        a reload its asset refused too, a save that does not compile), or None while it is fine. A product waiting for chunks a writer's CPU fallback served
        (a mirror only that writer's kernel writes) answers a ProductError naming the writer
        until those chunks are written on the GPU. Raises StaleHandleError for a stale handle."""
        product = self.product(handle)
        if product.exception is not None:
            return product.exception
        reload_error = getattr(product.ref, "error", None)
        if isinstance(reload_error, BaseException) and getattr(product.program, "read_at", 0.0) <= getattr(product.ref, "error_read_at", math.inf):
            # Its asset's last save does not compile: the last good kernel runs on; this said
            # None, the error only on the reference's diagnostics (review helper 196). Unless
            # the product runs a program read after that save (another library on the same
            # folder reloaded a fix its reference has not read: review helper 198).
            return reload_error
        if product.budget_error is not None:
            return product.budget_error  # served by its fallback, or waiting: off the GPU either way
        if product.waiting is None or not self._serves(product) or not product.pending:
            return None  # off the GPU (its fallback serves it), or nothing owed: it waits for nothing
        return product.waiting

    def generation(self, handle: GpuProductHandle) -> int:
        """The product's live GPU registration generation (0 while it runs on the CPU)."""
        gpu = self.product(handle).gpu
        return gpu.handle.generation if gpu is not None and gpu.handle is not None else 0

    def products(self) -> list[GpuProductHandle]:
        return [p.handle for p in self._order]  # type: ignore[misc]

    def select_tiles(self, handle: GpuProductHandle, tiles: Iterable[Any]) -> None:
        """Replace a ``SELECTED_TILES`` product's selection (computed from the next frame)."""
        self._select(handle, ReadbackPolicy.SELECTED_TILES, normalize_tiles(tiles, self.world.chunk_shape))

    def select_path(self, handle: GpuProductHandle, waypoints: Sequence[Any]) -> None:
        """Replace a ``SELECTED_PATH`` product's path (see :func:`~.selection.path_tiles`)."""
        self._select(handle, ReadbackPolicy.SELECTED_PATH, path_tiles(waypoints, self.world.chunk_shape))

    def _select(self, handle: GpuProductHandle, policy: ReadbackPolicy, tiles: tuple) -> None:
        product = self.product(handle)
        if product.policy is not policy:
            raise ProductError(f"product {product.key!r} is {product.policy.name}, not {policy.name}")
        product.set_selection(tiles, self.world.chunk_shape)
        if product.gpu is not None and product.gpu.capacity < len(tiles):
            self._gpu.release(product)  # outgrown: bigger buffers under a new generation
            if self.gpu_active:
                try:
                    self._gpu.register(product)
                except PluginError as exc:  # a loss no frame met yet, say: its fallback serves it
                    product.fail(exc, off_gpu=True)
                    log.warning("product %r runs on its CPU fallback: registering its grown selection failed:\n%s", product.key, exc)

    def set_params(self, handle: GpuProductHandle, params: Mapping[str, Any]) -> None:
        """New values of a product's params: a new GPU generation, every chunk recomputed.

        A hot reload the product refused (it keeps its previous kernel) is adopted when it
        fits these params: a reload that adds a param is taken up by setting it."""
        product = self.product(handle)
        if product.refused_program is not None and self._adopt_refused(product, params):
            return
        self._check_params(product, params=params)
        old = product.params
        product.params = held_values(params)
        if product.kernel is not None:
            try:  # output counts may read params (k records per item): plan them anew
                self._plan(product, product.kernel)
            except BaseException:
                product.params = old  # refused (or a bug): the product stays as it was
                raise
        self._recompute_all(product)

    def _recompute_all(self, product: Product) -> None:
        """A product with new params or a new kernel: a new GPU generation, every chunk owed
        again (the CPU fallback's results depend on both too)."""
        self._recompute(product)
        self._renew_dependents(product)

    def _recompute(self, product: Product) -> None:
        """A new GPU generation for ``product``, every chunk owed again (its fallback's
        results too: they depend on its params and kernel)."""
        product.cpu_done.clear()
        self._gpu.reregister(product)
        product.owe_everything(self.world)

    def _renew_dependents(self, writer: Product) -> None:
        """``writer``'s kernel or params changed: every mirror it writes changes, so the
        products whose results derive from those mirrors get a new generation too, and what
        they have in flight over the old mirror is discarded rather than applied (review
        helper 158: results over a writer's old-params mirror landed after set_params)."""
        written = set(writer.plan.written_fields) if writer.plan is not None else set()
        if not written:
            return
        self._writers = self._mirror_writers()
        for product in self._order:
            if product is not writer and written.intersection(self._fields_behind(product)):
                self._recompute(product)

    def _adopt_refused(self, product: Product, params: Mapping[str, Any]) -> bool:
        """Plan ``product``'s refused reload with ``params``; on success it runs from the next
        frame (a new generation, everything recomputed). Nothing changes when it still does
        not fit."""
        old = product.params
        product.params = held_values(params)
        try:
            self._plan(product, product.refused_program)
        except Exception:
            product.params = old
            return False
        product.refused_program = None
        product.fail(None)
        product.cpu_done.clear()
        self._new_kernel(product)
        product.owe_everything(self.world)
        return True

    def _new_kernel(self, product: Product) -> None:
        """A reload taken: a new GPU generation. Served by its fallback meanwhile (a lost GPU),
        what the old kernel computed on the GPU is recomputed once it is back there. Every
        chunk is owed: what the fallback computed stands only while the plan it computed for
        (record shape, outputs) is the product's (``Product.skip_computed``)."""
        self._gpu.reregister(product)
        if product.gpu is None:
            product.kernel_changed_off_gpu = True
            product.owe_everything(self.world)
        self._renew_dependents(product)

    def field_buffer(self, name: str, *, kernel_writes: bool = False) -> Any | None:
        """The GPU mirror of world field ``name`` (slot-major, what product kernels read), kept
        in sync with the world by every frame's uploads from now on; None while the engine
        runs on the CPU.

        Each slot of the mirror starts at a multiple of 4 bytes: a chunk of ``tile_count``
        values of ``b`` bytes takes ``ceil(tile_count * b / 4)`` words (bool and 8/16-bit
        fields are padded), so no upload is ever refused for alignment.

        Args:
            kernel_writes: the caller's kernels write state into this mirror. Then only the
                chunks that changed in the world are uploaded (each overwrites its own slot
                with the world's bytes: the world is authoritative), never the clean chunks
                between them that gap-coalescing (``EngineConfig.upload_gap_bytes``) would
                otherwise re-send. Without it, a kernel's writes into a clean chunk's slot may
                be overwritten by any frame's uploads. The rule holds for the field as long as
                the engine lives, for every reader.
        """
        self.world.field(name)  # an unknown field raises WorldError naming the declared ones
        self._gpu.keep(name, kernel_writes=kernel_writes)
        if self.gpu_active:
            self._claim_if_released()
        if not self.gpu_active or not self._gpu.mirror(name):
            return None
        return self.backend.field_buffer(name)

    def invalidate(self, handle: GpuProductHandle | None = None) -> None:
        """Recompute every chunk of one product (all products when None) from the next frame.

        Results already in flight still land and are applied (each was computed from the state
        at its dispatch: a product invalidated every frame, whose state changes on the GPU,
        would otherwise never apply one); the recomputation is applied after them."""
        for product in [self.product(handle)] if handle is not None else self._order:
            product.cpu_done.clear()  # recomputed on the CPU too, not skipped as computed
            product.owe_everything(self.world)

    # ---- the frame ---------------------------------------------------------------------

    def frame(self) -> FrameStats:
        """Run one frame (SPEC section 4 order); never waits for the GPU.

        Holds the world's lock (``World.lock``) throughout: a change another thread makes
        waits for the frame to end, so no frame sees half of one. The engine thread's own
        changes (from ``apply`` callbacks) go through.

        Raises:
            the first exception an ``apply`` or ``cpu_fallback`` callback raised, after the
            frame is complete (the other callbacks still ran).
        """
        with self._world_lock:
            return self._frame_steps()

    def _frame_steps(self) -> FrameStats:
        t0 = time.perf_counter()
        # Runs recorded in an open abi.batch() come first: this frame's submission follows them.
        flush_current_batch()
        st = FrameStats(frame=self._frame)
        self._frame += 1
        try:
            self._run_steps(st)
        except BaseException:
            # An interrupt (Ctrl-C in a callback, SystemExit) ends the frame here: what it did
            # (uploads, dispatches, results applied) still counts in the totals.
            st.time = time.perf_counter() - t0
            self.totals.add(st)
            raise
        st.frames_in_flight = self._gpu.frames_in_flight
        st.gpu_active = self.gpu_active
        st.time = time.perf_counter() - t0
        self.totals.add(st)
        error = self._delivery.take_error()
        if error is not None:
            raise error
        return st

    def _run_steps(self, st: FrameStats) -> None:
        """Steps 1 to 6 of a frame (SPEC section 4), counted into ``st``."""
        for product in self._order:  # what each kernel runs over this frame (a frame that dispatches nothing too)
            product.gpu_written.clear()
            product.dispatch_refused = False
        self._gpu.check(st)
        self._apply_reloads(st)  # 1
        self._reattach(st)
        index = ChunkIndex(self.world)  # the world holds still until step 5
        self._upload(st, index)  # 2
        wall: dict[str, float] = {}
        if self._paced(st):
            self._slot_waiting = any(p.slot_waits for p in self._order)
            with self._submission():  # 3, 4: one submission for the frame
                self._writers = self._mirror_writers()
                for product in self._order:
                    if product.mirror_unwritten and self._serves(product):
                        product.owe_unwritten(self.world)  # on the GPU: its kernel writes them
                for product in self._order:
                    if product.pending:
                        t, before = time.perf_counter(), st.dispatches
                        self._dispatch(product, st, index)
                        if st.dispatches > before:  # timed only when it ran on the GPU
                            wall[str(product.key)] = (time.perf_counter() - t) * 1e3
        for product in self._order:
            if product.waiting is not None and not product.pending:
                product.waiting = None  # it waits for nothing (the chunk left, a fallback served it)
        self._delivery.collect(st)  # 5
        self._note_gpu_times(st, wall)
        self._gpu.check(st)
        for product in self._order:  # 6
            if product.pending and (product.force_cpu or not self._serves(product)):
                self._delivery.fallback(product, st)

    def _note_gpu_times(self, st: FrameStats, wall: dict[str, float]) -> None:
        """``FrameStats.product_gpu_ms``: the GPU times whose timestamps landed during this
        frame (a frame or more after their dispatch; summed when several batches landed), or,
        on an adapter without timestamp queries, this frame's host time of each product that
        dispatched on the GPU. Empty when nothing new was measured: totals count each sample
        once."""
        if getattr(self.backend, "timestamps", False) and self.gpu_active:
            landed = self.backend.gpu_times()
            if landed:
                times: dict[str, float] = {}
                for sample in landed:
                    for key, ms in sample.items():
                        times[key] = times.get(key, 0.0) + ms
                st.product_gpu_ms, st.gpu_timing = times, "timestamps"
        elif wall:
            st.product_gpu_ms, st.gpu_timing = wall, "wall"

    def _paced(self, st: FrameStats) -> bool:
        """Whether this frame may dispatch: fewer than ``max_frames_in_flight`` frames of GPU
        work are outstanding (a finished readback marks its frame's work done). Otherwise the
        owed work waits for a later frame (counted in ``deferred``): ``frame()`` never blocks
        on a busy GPU, whose ``queue.submit`` would wait for the work before it."""
        if not self.gpu_active:
            return True
        self._delivery.poll()  # completions only: applied in step 5
        limit = 1 if getattr(self.backend, "serial_submits", False) else self.config.max_frames_in_flight
        if self._gpu.frames_in_flight < limit:
            return True
        st.deferred += sum(1 for p in self._order if p.pending and self._serves(p))
        return False

    def _reattach(self, st: FrameStats) -> None:
        """Products a refused upload took off the GPU come back (a new generation, their
        mirrors uploaded afresh): one refusal never moves a product to the CPU for good."""
        if not self.gpu_active:
            return
        for product in self._order:
            if product.detached and product.gpu is None and not product.gave_up:
                if product.reattach_wait > 0 and not all(self._gpu.mirrored(name) for name in product.field_names):
                    product.reattach_wait -= 1  # its field's upload was refused again: a later frame
                    continue  # (at once when another product brought its fields back: review helper 211)
                product.detached = False
                self._gpu.reregister(product)
                st.reregistered += product.gpu is not None

    def _submission(self) -> Any:
        batch = getattr(self.backend, "batch", None) if self.gpu_active else None
        return batch() if batch is not None else contextlib.nullcontext()

    def _serves(self, product: Product) -> bool:
        return product.gpu is not None and self.gpu_active

    def _apply_reloads(self, st: FrameStats) -> None:
        """Step 1: apply finished hot reloads; products whose program changed re-register."""
        libraries = {id(self.library): self.library} if self.library is not None else {}
        for product in self._order:
            lib = getattr(product.ref, "library", None)
            if lib is not None:
                libraries.setdefault(id(lib), lib)
        for lib in libraries.values():
            lib.poll()
        for product in self._order:
            if product.ref is not None:
                try:
                    program = product.ref.program()
                except PluginError:
                    continue  # never loaded: nothing to swap
                # What that program answers as: a second library on the same folder may have
                # reloaded the Program both share, which then follows its successor while this
                # library's reference still answers it (review helper 192: the product kept
                # the old kernel).
                current = getattr(program, "current", None)
                if current is not None:
                    program = current()
            else:
                # Registered with a Program (or a Variant's): it answers as whatever reloaded
                # it, and a body-only reload swapped its variants' pipelines in place; the
                # product takes the reload up as one registered through its asset does.
                current = getattr(product.program, "current", None)
                if current is None:
                    continue
                program = current()
            if program is product.program or program is product.refused_program:
                if product.gpu is not None and product.gpu.swapped:
                    # A reload this product does not see as one swapped its variant's pipeline
                    # in place (another library's on the same Program, a pinned view sharing
                    # the variant): registered again, as after a refused body-only reload; its
                    # dispatches were refused every frame with nothing said (review helper 192).
                    self._new_kernel(product)
                    st.reregistered += 1
                continue
            try:
                self._plan(product, program)
            except PluginError as exc:
                product.refused_program = program  # not retried every frame; the old kernel runs on
                product.fail(exc)
                log.warning("product %r keeps its previous kernel: the reloaded one does not fit:\n%s", product.key, exc)
                if product.gpu is not None and product.gpu.swapped:
                    # The reload was body-only for the variant it ran, whose pipeline was
                    # swapped in place: it is registered again on its pinned kernel's own.
                    self._new_kernel(product)
                    st.reregistered += 1
                continue
            product.fail(None)
            self._new_kernel(product)
            st.reregistered += 1

    def upload(self, st: FrameStats | None = None, index: ChunkIndex | None = None) -> FrameStats:
        """Step 2 of :meth:`frame` on its own: the products reading a changed field owe its
        chunks; the changed chunk fields go to their GPU mirrors, adjacent slots coalesced
        into one write. Answers (or adds to) ``st``'s upload counts. (``index``: the frame's
        slot/version cache, shared with the dispatch step.) Holds the world's lock, as
        :meth:`frame` does."""
        with self._world_lock:
            return self._upload(st, index)

    def _claim_dirty(self) -> None:
        """Keep this engine's dirty flags right: flags of its own go back to being the world's
        once the engine that held those is gone (``world.dirty()`` is cleared again), and an
        engine used after :meth:`close` claims flags again (a change meanwhile reached it)."""
        world = self.world
        if self._dirty_released:
            self._dirty_released = False
            token = world.claim_dirty(self)
            # The world's own flags were free (another may have taken some): every field is
            # sent again (this engine's flags only); flags of its own start all set. A
            # kernel-written mirror holds the GPU's state, which the world's bytes must not
            # overwrite: it gets the flags parked at close(), what the world changed since.
            # With nothing parked (no kernel-written mirror at close) every field is sent, one
            # its kernels began writing since too (its mirror was the world's then).
            parked, self._parked = self._parked, None
            kernel = [spec.name for spec in getattr(world, "fields", ()) if self._gpu.kernel_written(spec.name)] if parked is not None else []
            if token is None:
                for spec in getattr(world, "fields", ()):
                    if spec.name not in kernel:
                        world.set_dirty_flags(spec.name)
            if parked is not None:
                world.unpark_dirty(parked, kernel, consumer=token)
        elif self._dirty_token is not None:
            token = world.reclaim_dirty(self, self._dirty_token)
        else:
            return
        self._dirty_token = self._gpu.dirty_token = self._delivery.dirty_token = token

    def _claim_if_released(self) -> None:
        """:meth:`_claim_dirty` when it has something to do (flags released by close(), or a
        token to reclaim), under the world's lock: before anything asks the world's flags."""
        if self._claims and (self._dirty_token is not None or self._dirty_released):
            with self._world_lock:
                self._claim_dirty()

    def _upload(self, st: FrameStats | None, index: ChunkIndex | None) -> FrameStats:
        self._claim_if_released()  # under the world's lock already (an RLock: taken again)
        st = st if st is not None else FrameStats(frame=self._frame)
        readers: dict[str, list[Product]] = {name: [] for name in self._gpu.kept}
        for product in self._order:
            for name in product.field_names:
                readers.setdefault(name, []).append(product)
        gpu = self.gpu_active
        shared = index is not None  # the frame's: its work lists look up what the takes learn
        index = index if index is not None else ChunkIndex(self.world)
        meta = index.get
        # Every field's changes are taken and owed first, then every field's spans written: the
        # bookkeeping runs before the megabytes of copies evict it from the CPU's caches.
        sends: list[tuple[str, Any]] = []
        written = 0  # entries of ``sends`` whose writes are settled (sent, or re-dirtied)
        # Fields revalidation needs when each field changed (a mirror writer revalidates by fields: see Delivery._revalidator).
        note_changes = self.config.revalidate == "fields" or self._mirror_writers_registered()
        try:
            for name, products in readers.items():
                send = gpu and self._gpu.mirrored(name)
                gap = 0 if self._gpu.kernel_written(name) else self.config.upload_gap_bytes // self.world.chunk_nbytes(name)
                found = take_dirty_changes(self.world, name, gap, spans=send, meta=meta, consumer=self._dirty_token)
                changed = found.keys
                if not changed:
                    continue
                if send:
                    sends.append((name, found.spans))
                if shared and found.versions is not None:
                    index.learn(changed, found.slots, found.versions)  # the frame's work lists look them up
                if note_changes:
                    self._delivery.note_changes(name, found)
                for product in products:
                    product.owe_changed(changed, meta, found.versions, found.slots)
            since = index.clock
            if since is not None and index.moved:
                self._redirty_moved(since)
            stale: StaleSpanError | None = None
            for name, spans in sends:
                if not gpu:
                    break  # an earlier field's write failed closed: this frame's products fall back
                done = 0
                try:
                    done = upload_spans(self.backend, spans)
                except StaleSpanError as exc:
                    # The spans before the stale one were sent; the other fields' changes were
                    # taken already, so they are still written before this is raised.
                    done = exc.written
                    stale = stale or exc
                    written += 1
                    self._redirty(name, spans[done:])
                    continue
                finally:
                    st.uploads += done
                    st.upload_bytes += spans_nbytes(spans, done)
                written += 1
                if done < len(spans):
                    if self.gpu_active:  # refused, not failed closed: that mirror is behind
                        self._gpu.unmirror(name)
                    else:
                        gpu = False
        except BaseException:
            # Anything else raised (a bug, no memory, an interrupt) between a take and its write:
            # what was taken and not settled is dirty again (sending twice is harmless; losing a
            # change leaves the mirror wrong until the chunk changes again).
            for name, spans in sends[written:]:
                self._redirty(name, spans)
            raise
        if stale is not None:
            raise stale
        return st

    def _redirty(self, name: str, unsent: Sequence[UploadDesc]) -> None:
        """Mark field ``name`` of the live chunks of ``unsent`` spans dirty again: their
        changes were taken, and a stale span or an error stopped the writes before them (the
        next upload sends them)."""
        world = self.world
        for desc in unsent:
            for key in desc.chunk_keys:
                if key in world:
                    world.mark_dirty(key, name)

    def _redirty_moved(self, since: int) -> None:
        """Mark the world-mirrored fields of the chunks changed since clock ``since`` dirty
        again: another thread changed the world during the takes (single-threaded by
        contract), and a change landing inside a take (between reading and clearing the dirty
        flags) would otherwise lose its flag and never reach the mirror. Sending such a field
        twice is harmless. A field a kernel writes is left alone: its mirror holds the GPU's
        state, which the world's bytes would overwrite (which field a change touched is not
        known, only that the chunk changed)."""
        world = self.world
        names = [spec.name for spec in getattr(world, "fields", ()) if not self._gpu.kernel_written(spec.name)]
        if not names:
            return
        versions, keys_at = getattr(world, "slot_versions", None), getattr(world, "keys_at", None)
        if versions is not None and keys_at is not None and hasattr(world, "max_chunks"):
            slots = np.flatnonzero(np.asarray(versions(np.arange(world.max_chunks))) > since)
            keys = [k for k in keys_at(slots) if k is not None]
        else:
            keys = []
            for k in list(world.keys()):
                with contextlib.suppress(KeyError):  # evicted meanwhile
                    if world.version(k) > since:
                        keys.append(k)
        for k in keys:
            for name in names:
                with contextlib.suppress(KeyError):  # evicted meanwhile
                    world.mark_dirty(k, name)

    def _dispatch(self, product: Product, st: FrameStats, index: ChunkIndex) -> None:
        """Steps 3 and 4 for one product: dispatch its owed work, request the readback.

        Work past a bound (``max_chunks_per_dispatch``, the readback byte budget) is split into
        bounded dispatches, up to ``max_dispatches_per_product`` this frame; the rest stays
        owed for the next frames. Nothing is refused for its size alone."""
        for _ in range(self.config.max_dispatches_per_product):
            if not product.pending or not self._dispatch_once(product, st, index):
                return

    def _chunk_budget(self, product: Product, work: Any, readback: bool = True) -> tuple[int, int]:
        """(chunks one dispatch may take now, chunks it may take at most): the backend's
        ``max_chunks_per_dispatch`` and the readback bytes budget (free now, and in all)."""
        cfg = getattr(self.backend, "config", None)
        most = int(getattr(cfg, "max_chunks_per_dispatch", len(work.keys)) or len(work.keys))
        if product.policy is ReadbackPolicy.NONE or not readback or cfg is None:
            return most, most
        # A readback's size grows with the chunks but has a floor (a minimum buffer size, fixed
        # whole-dispatch outputs, alignment): the chunks that fit are found by the size itself,
        # not by an average per chunk (that refused one chunk that fit: review helper 170).
        chunks = len(work.keys)
        per = max(1, -(-int(work.items.size) // max(1, chunks)))  # work items a chunk
        budget = int(getattr(cfg, "max_inflight_readback_bytes", 0))
        free = budget - int(getattr(self.backend, "inflight_readback_bytes", 0))
        if 0 < free <= budget and product.gpu.readback_bytes(chunks * per) <= free:
            return min(most, chunks), min(most, chunks)  # the common case: all of it fits now, so in all too
        return min(most, self._chunks_fitting(product, per, free, chunks)), min(most, self._chunks_fitting(product, per, budget, chunks))

    @staticmethod
    def _chunks_fitting(product: Product, per: int, limit: int, at_most: int) -> int:
        """The most chunks (of ``per`` work items each, up to ``at_most``) whose readback takes
        at most ``limit`` bytes (the size grows with the items)."""
        size = product.gpu.readback_bytes
        if limit <= 0 or size(per) > limit:
            return 0
        if size(at_most * per) <= limit:
            return at_most  # the common case: all of it fits (one lookup a frame, not a search)
        lo, hi = 1, at_most
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if size(mid * per) <= limit:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _readback_never_fits(self, product: Product, work: Any, most: int, splittable: bool, mirror_only: bool) -> ReadbackBudgetError | None:
        """Why ``work``'s readback can never be taken (one chunk's results, or a whole path's,
        are more than ``max_inflight_readback_bytes``; a ``FULL_FIELD`` readback the backend is
        not configured to allow), or None."""
        if mirror_only or product.policy is ReadbackPolicy.NONE:
            return None
        if product.policy is ReadbackPolicy.FULL_FIELD and getattr(getattr(self.backend, "config", None), "allow_full_field", True) is False:
            # Refused every frame: its kernel ran for nothing and its fallback served it, with
            # nothing said (review helper 227).
            return ReadbackBudgetError(
                f"product {product.key!r}: a FULL_FIELD readback is debug-only and this engine's backend does not allow it: "
                + ("its CPU fallback serves it" if product.cpu_fallback is not None and not self._reads_others_gpu_state(product) else "it waits")
                + "; set EngineConfig(backend=WgpuBackendConfig(allow_full_field=True)) to read it back from the GPU"
            )
        if most >= 1 and (splittable or len(work.keys) <= most):
            return None
        budget = getattr(getattr(self.backend, "config", None), "max_inflight_readback_bytes", None)
        if not isinstance(budget, int) or not work.keys:
            return None
        if splittable:
            per = max(1, -(-int(work.items.size) // len(work.keys)))
            need, what = product.gpu.readback_bytes(per), "one chunk's results take"
        else:
            need, what = product.gpu.readback_bytes(int(work.items.size)), f"a path of {len(work.keys)} chunks takes"
        if need <= budget:
            return None  # bounded by max_chunks_per_dispatch, not by bytes: a path goes whole
        return ReadbackBudgetError(
            f"product {product.key!r}: {what} {need} bytes to read back, more than max_inflight_readback_bytes ({budget}) allows: "
            "its results can never come back from the GPU"
            + ("; its CPU fallback serves it" if product.cpu_fallback is not None and not self._reads_others_gpu_state(product) else "; it waits")
            + ": raise the budget (WgpuBackendConfig)"
        )

    def _path_never_dispatched(self, product: Product, work: Any, splittable: bool) -> ReadbackBudgetError | None:
        """Why a path's work can never go in one dispatch (it has more chunks than
        ``max_chunks_per_dispatch``), or None: its dispatch was built and refused every frame,
        with nothing said (review helper 180)."""
        most = getattr(getattr(self.backend, "config", None), "max_chunks_per_dispatch", None)
        if splittable or not isinstance(most, int) or most < 1 or len(work.keys) <= most:
            return None
        return ReadbackBudgetError(
            f"product {product.key!r}: a path of {len(work.keys)} chunks is more than max_chunks_per_dispatch ({most}) lets one dispatch take: "
            "it never runs on the GPU"
            + ("; its CPU fallback serves it" if product.cpu_fallback is not None and not self._reads_others_gpu_state(product) else "; it waits")
            + ": raise max_chunks_per_dispatch (WgpuBackendConfig)"
        )

    def _note_waiting(self, product: Product, blocked: set[int]) -> None:
        """``product.waiting`` (its ``product_error``, logged once an episode) while it waits
        for chunks ``blocked`` a writer's CPU fallback served (a fallback writes no mirror):
        they wait for the writer's kernel to run on the GPU again (``recover_gpu()``, a
        reload). Cleared when no such chunk holds it back. Waiting for owed work, a frame, is
        not news."""
        for name in product.field_names:
            for w in self._writers.get(name, ()):
                if w is product:
                    continue
                if not blocked.isdisjoint(w.mirror_unwritten):
                    why = (
                        f"product {product.key!r} waits for {w.key!r} to write the mirror {name!r} on the GPU: its CPU fallback served "
                        "chunks it did not write; those results wait for its kernel to run on the GPU again"
                    )
                elif (w.waiting is not None or w.budget_error is not None) and not blocked.isdisjoint(w.pending):
                    # Behind a writer that waits itself (a chain of mirrors; one whose readback
                    # never fits): said, not silent (review helpers 101, 172).
                    why = f"product {product.key!r} waits for {w.key!r} to write the mirror {name!r}, which waits in turn: {w.waiting or w.budget_error}"
                else:
                    continue
                if product.waiting is None or str(product.waiting) != why:
                    product.waiting = ProductError(why)
                    log.warning("%s", product.waiting)
                return
        product.waiting = None  # the next waiting episode is reported again

    def _fields_behind(self, product: Product) -> tuple[str, ...]:
        """The fields ``product``'s results derive from: those it reads and, through every
        kernel-written mirror among them, the fields that mirror's writers read (transitively)."""
        out = dict.fromkeys(product.field_names)
        if not self._writers:
            return tuple(out)
        seen, todo = {id(product)}, [product]
        while todo:
            p = todo.pop()
            own = set(p.plan.written_fields) if p.plan is not None else set()
            # Through the mirrors it reads, not those it writes (its read_write binding is how it
            # writes: another writer of the same mirror is no input of its results).
            for name in p.field_names:
                if name in own:
                    continue
                for w in self._writers.get(name, ()):
                    if id(w) not in seen:
                        seen.add(id(w))
                        out.update(dict.fromkeys(w.field_names))
                        todo.append(w)
        return tuple(out)

    def _upstream_owed(self, writer: Product, seen: set[int]) -> set[int]:
        """Chunks owed to writers registered before ``writer`` of the mirrors it reads, and to
        theirs (transitively): once those run, ``writer`` runs over them again, and so does a
        reader of its mirror (review helper 158: a reader of m2 ran before m1's writer, then
        again after it, and the same version was applied twice)."""
        out: set[int] = set()
        here = self._position.get(id(writer), -1)
        for name in writer.field_names:
            for w in self._writers.get(name, ()):
                if w is writer or id(w) in seen or self._position.get(id(w), -1) >= here:
                    continue
                seen.add(id(w))
                out |= w.pending
                out |= w.mirror_unwritten
                out |= self._upstream_owed(w, seen)
        return out

    def _reads_others_gpu_state(self, product: Product) -> bool:
        """Whether ``product`` reads a kernel-written mirror that it does not write alone."""
        own = set(product.plan.written_fields) if product.plan is not None else set()
        writers = self._writers
        return any(self._gpu.kernel_written(name) and (name not in own or any(w is not product for w in writers.get(name, ()))) for name in product.field_names)

    def _reads_gpu_state(self, product: Product) -> bool:
        """Whether ``product`` reads a kernel-written mirror (state the world's bytes lack)."""
        return any(self._gpu.kernel_written(name) for name in product.field_names)

    def _no_slot_for(self, product: Product) -> str | None:
        """Why the backend's readback count budget (``max_inflight_readbacks``) leaves
        ``product`` no slot now: "none" is free, or the free ones are "owed" to readers of GPU
        state that waited longer (so each gets one in turn, in registration order); None: one
        is its."""
        most = getattr(getattr(self.backend, "config", None), "max_inflight_readbacks", None)
        if not isinstance(most, int) or most < 1:
            return None
        free = most - int(getattr(self.backend, "inflight_readbacks", 0))
        if free <= 0:
            return "none"
        if not self._slot_waiting:
            return None  # no reader waits for a slot: no product counts the others
        # Only readers still served on the GPU are owed a slot: one that left it (a failure,
        # given up) would never take it.
        longer = sum(
            1
            for p in self._order
            if p is not product
            and p.slot_waits > product.slot_waits
            and p.pending
            and self._serves(p)
            and not p.force_cpu
            and not p.pending <= self._unwritten_for(p)
        )
        return "owed" if longer >= free else None

    def _owe_readers(self, writer: Product, keys: Any, *, later_only: bool = False) -> None:
        """Every other product reading a mirror ``writer`` writes owes ``keys`` (those still in
        the world); ``later_only``: only those registered after it.

        Two uses. The chunks its kernel just wrote that its fallback had served (or left
        unwritten), for every reader: one served meanwhile (its fallback, from the world's
        bytes, while the writer was off the GPU) kept that value for good once the writer's
        kernel changed the mirror it reads (review helper 150: 80 for good where the mirror
        summed to 96). And the chunks its kernel writes this frame, for the readers registered
        after it, which run over them in this frame's submission after the write: a change to a
        field only the writer reads (``m = 2a + 1`` from ``a``) owed the writer alone, and a
        reader of ``m`` kept its result for good (review helper 154). Readers registered before
        it read the mirror as it left it the frame before (state fed back): owing them every
        write would run both every frame from then on."""
        written = set(writer.plan.written_fields) if writer.plan is not None else set()
        world = self.world
        after = not later_only
        for reader in self._order:
            if reader is writer:
                after = True
            elif after and written.intersection(reader.field_names):
                reader.pending.update(k for k in keys if k in world)

    def _mirror_writers_registered(self) -> bool:
        """Whether a registered product's kernel writes a mirror."""
        return any(p.plan is not None and p.plan.written_fields for p in self._order)

    def _mirror_writers(self) -> dict[str, list[Product]]:
        """Each mirror a registered product's kernel writes -> those products."""
        writers: dict[str, list[Product]] = {}
        self._position = {id(p): i for i, p in enumerate(self._order)}
        for p in self._order:
            for name in p.plan.written_fields if p.plan is not None else ():
                writers.setdefault(name, []).append(p)
        return writers

    def _unwritten_for(self, reader: Product) -> set[int]:
        """The chunks whose mirror ``reader`` reads another product has yet to write on the
        GPU: work still owed by a writer registered before ``reader`` (it runs first in the
        frame's submission), or work any writer's CPU fallback served (which writes no
        mirror). A result ``reader`` computed over them would claim their new versions over
        the old mirror. A writer registered after ``reader`` writes for the next frame: the
        reader sees the mirror as it left it (state fed back, as the demo's heat step and copy),
        and when that writer reads a mirror ``reader`` writes, ``reader``'s own owed chunks do
        not wait for its fallback-served ones (each would wait for the other)."""
        writers = self._writers
        if not writers:
            return set()
        out: set[int] = set()
        here = self._position.get(id(reader), -1)
        writes = set(reader.plan.written_fields) if reader.plan is not None else set()
        for name in reader.field_names:
            for w in writers.get(name, ()):
                if w is reader:
                    continue
                if self._position.get(id(w), -1) < here:
                    out |= w.pending
                    out |= w.mirror_unwritten
                    out |= self._upstream_owed(w, {id(reader), id(w)})
                elif w.mirror_unwritten and writes.intersection(w.field_names):
                    # A later writer that reads a mirror this one writes waits for this one's owed
                    # work; waiting here for its fallback-served chunks among that work too held
                    # both for good (review helpers 98, 103: two writers of one mirror, a
                    # ping-pong of two). This one goes first and reads what the later one left
                    # the frame before, as any reader registered before a writer does.
                    out |= w.mirror_unwritten - reader.pending
                else:
                    out |= w.mirror_unwritten
        return out

    def _dispatch_once(self, product: Product, st: FrameStats, index: ChunkIndex) -> bool:
        """One bounded dispatch of ``product``'s owed work; answers whether to go on."""
        if not self._serves(product):
            return False
        gpu = product.gpu
        work = product.work(self.world, index=index)
        if not work:
            return False  # only evicted chunks were owed (dropped), or a path through one (owed when it is back)
        unwritten = self._unwritten_for(product) if self._writers else None
        blocked = unwritten.intersection(work.keys) if unwritten else set()
        if product.waiting is not None or blocked:
            self._note_waiting(product, blocked)
        if blocked:
            # Chunks whose mirror a writer has not brought up to date on the GPU: next frame
            # (or once the writer is back on the GPU); the others go now (a path goes whole).
            keys = [k for k in work.keys if k not in blocked]
            if not keys or product.policy is ReadbackPolicy.SELECTED_PATH:
                st.deferred += 1
                return False
            work = product.work(self.world, keys=set(keys), index=index)
            if not work:
                return False
        # Chunks its fallback served (results applied) that its kernel runs over only to write
        # the mirror: dispatched without a readback, so no result is applied twice. Chunks owed
        # a result go first, in a dispatch of their own (a path goes whole, with its readback).
        mirror_only = False
        # A writer that reads a mirror another kernel writes: its fallback computed from the
        # world's bytes of that mirror, not the GPU's state, so those results are owed again
        # with the mirror (its result stayed the fallback's for good, review helper 158).
        if product.mirror_unwritten and product.policy is not ReadbackPolicy.NONE and not self._reads_others_gpu_state(product):
            rewrite = product.rewrites(work)
            if len(rewrite) == len(work.keys):
                mirror_only = True
            elif rewrite and product.policy is not ReadbackPolicy.SELECTED_PATH:
                work = product.work(self.world, keys=set(work.keys).difference(rewrite), index=index)
                if not work:
                    return False
        if work.items.size > gpu.capacity:
            self._gpu.reregister(product)  # outgrown (a selection): bigger buffers next frame
            return False
        if product.policy is not ReadbackPolicy.NONE and not mirror_only:
            short = self._no_slot_for(product)
            if short and self._reads_gpu_state(product):
                # Its readback would be refused and the CPU fallback would serve it from the
                # world's bytes, which a kernel-written mirror has left behind: a later frame
                # instead, when readers that waited longer leave it a slot (in registration order).
                product.slot_waits += 1
                self._slot_waiting = True
                st.deferred += 1
                return False
            if short == "owed":  # the free slots are owed to waiting readers of GPU state
                product.force_cpu = True  # served as a refused readback is: its CPU fallback
                return False
        now, most = self._chunk_budget(product, work, readback=not mirror_only)
        splittable = product.policy is not ReadbackPolicy.SELECTED_PATH  # a path is all or nothing
        too_long = self._path_never_dispatched(product, work, splittable)
        too_big = too_long or self._readback_never_fits(product, work, most, splittable, mirror_only)
        if too_big is not None:
            # Its readback would be refused every frame for good: the GPU's work wasted and
            # nothing said (review helper 165). Said once (beside any other error: a refused
            # reload's stays, helper 170). A mirror writer still runs its kernel (its readers
            # follow the mirror) and its fallback serves its results, as for a refused readback;
            # any other product is served by its fallback without dispatching.
            if product.budget_error is None or str(product.budget_error) != str(too_big):
                product.budget_error = too_big
                log.warning("%s", too_big)
            if self._reads_others_gpu_state(product):
                # Its fallback would compute from the world's bytes of a mirror a kernel writes
                # (a wrong number): it waits, said, until the budget is raised.
                return False
            if too_long is not None or product.plan is None or not product.plan.written_fields:
                product.force_cpu = True  # (a path too long for one dispatch never runs: no dispatch to build)
                return False
            now, most = self._chunk_budget(product, work, readback=False)  # no readback: bounded by the dispatch size only
        elif product.budget_error is not None:
            product.budget_error = None  # fits again (a reload made its results smaller)
        if len(work.keys) > now and most >= 1 and (splittable or len(work.keys) <= most):
            if now < 1 or not splittable:
                st.deferred += 1  # the readback budget is taken by work in flight: next frame
                return False
            # The chunks sent longest ago first: in slot order, a chunk changed every frame took
            # every dispatch and starved the others for good (review helper 207).
            work = product.work(self.world, keys=set(product.longest_unsent(work, now)), index=index)
        try:
            desc = gpu.dispatch_desc(work.items, len(work.keys))
        except Exception as exc:
            # The run does not check (a DispatchError), the device went away meanwhile, or the
            # product's inputs= are not this device's (after recover_gpu): its fallback serves
            # it until it is registered again (set_params, a reload, recover_gpu).
            product.fail(exc, off_gpu=True)
            log.warning("product %r leaves the GPU: its dispatch cannot be prepared:\n%s", product.key, exc)
            self._gpu.release(product)
            st.refused += 1
            product.force_cpu = True
            return False
        if not self.backend.dispatch(desc):
            desc.prepared.submitted()  # refused: nothing of it will run
            st.refused += 1
            product.force_cpu = True
            # A refusal that repeats is a limit (too many workgroups): the fallback serves the
            # writer whole. A one-off leaves a mirror writer's chunks owed to its kernel.
            product.dispatch_refusals += 1
            product.dispatch_refused = product.dispatch_refusals >= DISPATCH_REFUSALS_TO_FALLBACK
            return False
        st.dispatches += 1
        product.dispatch_refusals = 0
        if product.plan is not None and product.plan.written_fields:
            self._owe_readers(product, work.keys, later_only=True)
        if product.mirror_unwritten:
            caught_up = product.mirror_unwritten.intersection(work.keys)
            if caught_up:
                product.mirror_unwritten.difference_update(caught_up)  # written on the GPU now
                self._owe_readers(product, caught_up)
        product.gpu_written.update(work.keys)  # a refused readback's fallback after this wrote no mirror, but this did
        if product.policy is ReadbackPolicy.NONE or mirror_only:
            product.done(work)
            return True
        if too_big is not None:  # its results cannot come back: the CPU serves them (step 6)
            product.force_cpu = True
            return False
        prepared = desc.prepared
        size = readback_extent(product.plan, prepared.layout)  # type: ignore[arg-type]
        readback = ReadbackDesc(
            gpu.handle,
            product.policy,
            0,
            size,
            chunk_keys=work.keys,
            versions=work.versions,
            tiles=tuple((k, *t) for k, t in work.tiles) if product.policy is ReadbackPolicy.SELECTED_TILES else (),
            path=tuple((k, *t) for k, t in work.tiles) if product.policy is ReadbackPolicy.SELECTED_PATH else (),
            user=InFlight(product, gpu.handle, work, st.frame, product.plan, prepared.layout, product.epoch),  # type: ignore[arg-type]  # registered products have a plan
        )
        if not self.backend.readback(readback):
            st.refused += 1
            product.force_cpu = True  # dispatched, but its results cannot come back: the CPU serves it
            return False
        st.readbacks_requested += 1
        product.inflight += 1
        product.slot_waits = 0
        self._gpu.readback_requested(st.frame)
        product.done(work)
        return True

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
        backend = self._gpu.acquire(device)
        if backend is None:
            return False
        for product in self._order:
            product.gpu = None
        self._gpu.close_backend()  # fails what is pending; their callbacks land in delivery
        self._delivery.reowe_completed()
        self._gpu.adopt(backend)  # the old backend's readbacks were all failed above
        self._claim_if_released()  # registering mirrors the fields: it asks the world's flags
        for product in self._order:
            product.inflight = 0
            product.gave_up = product.detached = False
            product.readback_failures = 0
            if product.program is not None:
                try:
                    self._gpu.register(product)
                except PluginError as exc:  # this product stays on its fallback; the others go on
                    product.fail(exc, off_gpu=True)
                    log.warning("recover_gpu: product %r stays on the CPU:\n%s", product.key, exc)
                if product.gpu is not None and isinstance(product.exception, DeviceLostError):
                    product.fail(None)  # the loss it reported is over: it is on the GPU again
                if product.gpu is not None and (_keeps_gpu_state(product) or self._reads_gpu_state(product)):
                    # What it wrote lived on the old device (a kernel-written mirror starts
                    # again from the world's bytes): every chunk is owed again, or the engine
                    # reads idle over derived state that is gone (review helper 81). A reader of
                    # such a mirror too: with no writer registered to re-own it, it kept the lost
                    # device's value for good (review helper 158).
                    product.owe_everything(self.world)
        log.info("GPU recovered on %s; %d product(s) re-registered", self._gpu.adapter_name, sum(p.gpu is not None for p in self._order))
        return self.gpu_active

    def close(self) -> None:
        """Unregister every product; close the backend when the engine made it."""
        for product in list(self._order):
            self.unregister_product(product.handle)  # type: ignore[arg-type]
        if self._gpu.owns_backend:
            self.backend.close()
        if self._delivery.waiting:
            # Readbacks the close failed (or that landed undelivered): counted now, for products
            # unregistered above, never applied. They were counted nowhere, and the engine said
            # it was busy until a frame after its close (review helper 217).
            st = self.totals.empty_like()
            self._delivery.deliver_completed(st)
            self.totals.add(st)
        if self._claims and not self._dirty_released:
            if any(self._gpu.kernel_written(spec.name) for spec in getattr(self.world, "fields", ())):
                # Its flags are parked (the untaken ones, and what changes meanwhile): a reuse
                # sends a mirror its kernels write exactly what the world changed.
                self._parked = self.world.park_dirty(self, self._dirty_token)
            else:
                self.world.release_dirty(self, self._dirty_token)  # a reuse sends everything again
            self._dirty_released = True  # claimed again if the engine is used after all

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "GPU" if self.gpu_active else f"CPU ({self.gpu_fault or type(self.backend).__name__})"
        return f"<Engine {len(self._order)} products on {where}, frame {self._frame}>"


DISPATCH_REFUSALS_TO_FALLBACK = 3  # refused dispatches in a row after which a mirror writer's fallback serves it whole


def _keeps_gpu_state(product: Product) -> bool:
    """Whether what the product computes lives on the GPU: a ``NONE`` product (it writes
    mirrors or the buffers and textures it was given), or one whose kernel writes a mirror."""
    return product.policy is ReadbackPolicy.NONE or (product.plan is not None and bool(product.plan.written_fields))


def _takes_consumer(world: Any) -> bool:
    """Whether ``world``'s dirty-flag calls take ``consumer=`` (a World, or a subclass whose
    overrides kept it): only then can a second engine keep flags of its own."""
    for name in ("take_dirty_slots", "take_dirty", "is_dirty"):
        fn = getattr(world, name, None)
        if fn is None:
            continue
        try:
            if "consumer" not in inspect.signature(fn).parameters:
                return False
        except (TypeError, ValueError):
            return False
    return True


def _params_span(program: Any) -> Span | None:
    """Where ``program``'s bindings.yaml lists its params: its top-level ``params:`` line, else
    its first param's, else the file."""
    schema = getattr(program, "schema", None)
    path = getattr(program, "yaml_path", None)
    if schema is None or path is None:
        return None
    for number, line in enumerate((schema.text or "").split("\n"), 1):
        line = line.rstrip("\r")
        if re.match(r"params\s*:(\s|#|$)", line):
            return Span(path, number, 1, line)
    first = schema.params[0] if schema.params else None
    return (_param_span(program, first.name) if first is not None else None) or Span(path)


def _param_span(program: Any, name: str) -> Span | None:
    """Where ``program``'s bindings.yaml declares param ``name`` (file, line, column)."""
    schema = getattr(program, "schema", None)
    found = next((p for p in getattr(schema, "params", ()) if p.name == name), None)
    if schema is None or found is None or not found.line:
        return None
    lines = (schema.text or "").split("\n")
    text = lines[found.line - 1] if 0 < found.line <= len(lines) else None
    col = text.find(name) + 1 if text and name in text else None
    return Span(program.yaml_path, found.line, col or None, text)
