"""The product contract: how a compiled variant's bindings meet the world and the engine.

A product is any variant of any asset. The engine binds its bindings by name:

* **a work list** the engine fills each dispatch: ``chunks`` (u32 mirror slots, one work item
  a chunk) for ``SUMMARY`` / ``NONE`` products, or ``tiles`` (u32 global tile indices,
  ``slot * tile_count + tile``, one work item a tile) for ``SELECTED_TILES``,
  ``SELECTED_PATH`` and ``FULL_FIELD`` products; a ``NONE`` product takes either (``tiles``:
  every tile of each owed chunk). ``zero_n()`` is the item count, and a
  ``domain_count`` binding holds it too (so ``live`` outputs report it).
* **field inputs**: every other ``access: read`` buffer is bound to a world field's whole
  GPU mirror (slot-major, ``tile_count`` values a slot), by ``fields=``; a ``read_write``
  buffer without a count bound to a field writes that field's mirror (derived GPU state).
* **inputs the caller supplies once** (``inputs=``): tables, pages and their columns,
  textures, storage textures, constant buffers. An unbound ``columns`` table is empty.
* **outputs**, any number, in the engine's own results area (zeroed before each dispatch):
  a ``read_write`` buffer whose ``count`` is ``k * n`` holds ``k`` records per work item
  (revalidated and applied per chunk); any other count, and every ``append`` (with its
  count), is a whole-dispatch output, applied only when every chunk it covers is current.
  ``readback=`` picks the outputs read back (default all; ``NONE`` reads none).
* **params** the engine fills when the schema declares them: ``tile_count`` (u32),
  ``inv_tile_count`` (f32, rounded once on the host), ``chunk_width``, ``chunk_height``,
  ``slot_count`` (u32), and ``<binding>_slot_words`` (u32) per field input: the words one
  chunk slot takes in its mirror (a sub-word field pads its slots to whole words; a kernel
  reading such a field as raw words without declaring it is warned about at registration). Other params are the product's own
  (``params=``).

The *primary* output (the first per-item output read back) gives ``ProductResult.values``
and the record shape a CPU fallback answers; ``ProductResult.outputs`` has every output read
back, by name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import PluginError, Span, in_source
from ..gpu.descriptors import ReadbackPolicy, slot_stride
from ..gpu.handles import GpuProductHandle
from ..lowering.expressions import parse_expression

__all__ = [
    "ENGINE_PARAMS",
    "ProductError",
    "ProductPlan",
    "ProductResult",
    "ProductWork",
    "engine_param_values",
    "plan_product",
]

CHUNK_ITEMS = "chunks"
TILE_ITEMS = "tiles"
CHUNK_POLICIES = (ReadbackPolicy.SUMMARY, ReadbackPolicy.NONE)
TILE_POLICIES = (ReadbackPolicy.SELECTED_TILES, ReadbackPolicy.SELECTED_PATH, ReadbackPolicy.FULL_FIELD)

# name -> WGSL type of the params the engine fills from the world's shape.
ENGINE_PARAMS = {"tile_count": "u32", "inv_tile_count": "f32", "chunk_width": "u32", "chunk_height": "u32", "slot_count": "u32"}

log = logging.getLogger("engine_plugin.engine")

_SCALAR_DTYPES = {"f32": np.dtype("<f4"), "i32": np.dtype("<i4"), "u32": np.dtype("<u4")}
# Which field formats a (non-bits) field input of each scalar type reads by value.
_FIELD_SCALAR = {"F32": "f32", "I32": "i32", "U32": "u32"}


class ProductError(PluginError, ValueError):
    """A product registration that cannot work: a kernel outside the product contract, an
    unknown field, a policy its work list cannot serve, a bad selection."""


@dataclass(frozen=True)
class FieldBinding:
    """A field input of a product: the binding, the world field, the binding index."""

    binding: str
    field: str
    index: int
    element_bytes: int  # bytes of one element of the binding (the mirror holds size // this)
    writes: bool = False  # a read_write binding: the kernel writes the field's mirror


@dataclass(frozen=True)
class OutputPlan:
    """One output of a product: ``per_item`` records per work item (0: a whole-dispatch
    output, such as an append or a fixed-size histogram), each of ``lanes`` values."""

    name: str
    binding: int
    role: str  # "output" or "append"
    dtype: np.dtype
    lanes: int
    per_item: int
    capacity: str | None = None  # an append's capacity expression (a CPU fallback's answer is capped by it)

    @property
    def record_shape(self) -> tuple[int, ...]:
        """The shape of one work item's records (``per_item`` > 1 adds a leading axis)."""
        lanes = (self.lanes,) if self.lanes > 1 else ()
        return ((self.per_item,) if self.per_item > 1 else ()) + lanes


@dataclass(frozen=True)
class ProductPlan:
    """What the engine binds where for one variant (validated against a world)."""

    items: str  # CHUNK_ITEMS or TILE_ITEMS
    items_index: int
    fields: tuple[FieldBinding, ...]
    output: str
    output_index: int
    params_index: int
    record_dtype: np.dtype
    record_shape: tuple[int, ...]
    record_bytes: int
    engine_params: tuple[str, ...]
    user_params: tuple[str, ...]
    lanes: int
    outputs: tuple[OutputPlan, ...] = ()
    readback: tuple[str, ...] = ()  # the outputs read back, in order
    inputs: tuple[str, ...] = ()  # bindings the caller supplies at registration (inputs=)
    domain_count: bool = False  # the kernel has a domain_count binding: the item count
    # ``<binding>_slot_words`` params the kernel declares: the words one chunk slot takes in
    # that field's mirror (sub-word fields pad a slot to whole words), as (name, value)
    slot_params: tuple[tuple[str, int], ...] = ()

    @cached_property
    def written_fields(self) -> tuple[str, ...]:
        """The world fields whose mirrors the kernel writes (read_write field bindings)."""
        return tuple(dict.fromkeys(f.field for f in self.fields if f.writes))

    @cached_property
    def read_outputs(self) -> tuple[OutputPlan, ...]:
        """The outputs read back, in readback order (made once: every dispatch's readback
        and every delivery asks)."""
        by_name = {o.name: o for o in self.outputs}
        return tuple(by_name[n] for n in self.readback)

    @cached_property
    def field_names(self) -> tuple[str, ...]:
        """The world fields the product reads, each once, in binding order (made once: the
        upload step asks every product every frame)."""
        return tuple(dict.fromkeys(f.field for f in self.fields))


def _error(message: str, where: str | None, line: int | None = None) -> ProductError:
    return ProductError(message, Span(where, line or None) if where else None)


def plan_product(
    lowered: Any,
    world: Any,
    fields: Mapping[str, str] | Sequence[str] | None,
    policy: ReadbackPolicy,
    where: str | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    inputs: Mapping[str, Any] | None = None,
    readback: Sequence[str] | None = None,
) -> ProductPlan:
    """Check a lowered variant against the product contract and ``world``; answer its plan.

    Args:
        lowered: the variant's :class:`~engine_plugin.lowering.Lowered` (no device needed).
        fields: binding name -> world field, or a list of world fields taken by the field
            inputs in binding order, or None (each field input names a world field).
        where: the asset's bindings.yaml path, for error locations.
        params: the product's own param values (output counts may read them).
        inputs: bindings the caller supplies once (tables, pages, columns, textures, buffers).
        readback: the outputs read back (default: every output; none for ``NONE``).
    Raises:
        ProductError: naming the binding (and its bindings.yaml line and column) that breaks
            the contract.
    """
    try:
        return _plan_product(lowered, world, fields, policy, where, params=params, inputs=inputs, readback=readback)
    except ProductError as exc:
        span, texts = exc.span, lowered.source_map.texts
        if span is not None and span.line and span.col is None and texts:
            exc.span = in_source(span.path, texts[0], span.line)  # the column and the caret
            exc.args = (exc.render(),)
        raise


def _plan_product(
    lowered: Any,
    world: Any,
    fields: Mapping[str, str] | Sequence[str] | None,
    policy: ReadbackPolicy,
    where: str | None,
    *,
    params: Mapping[str, Any] | None,
    inputs: Mapping[str, Any] | None,
    readback: Sequence[str] | None,
) -> ProductPlan:
    variant = where
    given = dict(inputs or {})
    for c in lowered.columns:
        if c.name not in given:
            raise _error(f"column {c.name!r} (a run of page {c.page!r}) is bound to nothing; pass it in inputs=", variant, c.line)
    items = None
    reads, outputs = [], []
    domain_count = False
    slots = {s.name: s for s in lowered.host_slots}
    unknown = sorted(n for n in given if n not in slots and n not in {c.name for c in lowered.columns})
    if unknown:
        raise _error(f"inputs= names {unknown[0]!r}, which is not a binding of this kernel", variant)
    for slot in lowered.host_slots:
        if slot.name in given:
            if slot.role in ("output", "append", "domain_count") or slot.name in (CHUNK_ITEMS, TILE_ITEMS):
                raise _error(f"binding {slot.name!r} is filled by the engine; leave it out of inputs=", variant, slot.line)
            continue
        if slot.role == "input" and slot.name in (CHUNK_ITEMS, TILE_ITEMS):
            if items is not None:
                raise _error(f"binding {slot.name!r}: a product has one work list, {items.name!r} or {slot.name!r}, not both", variant, slot.line)
            items = slot
        elif slot.role in ("input", "inout"):
            reads.append(slot)  # a world field (inout: the kernel writes the field's mirror)
        elif slot.role in ("output", "append"):
            outputs.append(slot)
        elif slot.role == "domain_count":
            domain_count = True  # the engine passes the work item count
        elif slot.role in ("table", "sampler"):
            pass  # an unbound table is empty (the seed); a sampler is made from the schema
        elif slot.role == "page" and any(c.page == slot.name for c in lowered.columns):
            pass  # its buffer comes from its columns' runs (given in inputs=, checked above)
        else:
            raise _error(f"binding {slot.name!r} ({slot.role}) is bound to nothing; pass it in inputs=", variant, slot.line)
    if items is None:
        raise _error(
            "a product kernel declares its work list: "
            "'- { name: chunks, kind: buffer, access: read, element: u32 }' (one item a chunk) or "
            "'- { name: tiles, ... }' (one item a tile)",
            variant,
        )
    if items.scalar != "u32" or items.lanes != 1 or items.bits:
        raise _error(f"work list {items.name!r} must be element: u32, not {items.element}", variant, items.line)
    wanted = CHUNK_ITEMS if policy in CHUNK_POLICIES else TILE_ITEMS
    if policy is ReadbackPolicy.NONE:
        wanted = items.name
    if items.name != wanted:
        raise _error(
            f"policy {policy.name} reads back {'one record a chunk' if wanted == CHUNK_ITEMS else 'one record a tile'}: "
            f"the kernel's work list must be {wanted!r}, not {items.name!r}",
            variant,
            items.line,
        )
    field_bindings = _bind_fields(variant, world, reads, fields)

    declared = {f.name: f for f in lowered.params.fields if f.origin == "user"}
    engine_params = []
    for name, wgsl in ENGINE_PARAMS.items():
        f = declared.get(name)
        if f is None:
            continue
        if f.type != wgsl:
            raise _error(f"param {name!r} is filled by the engine as {wgsl}; declare it as type: {wgsl}, not {f.type}", variant)
        engine_params.append(name)
    slot_params = _slot_params(variant, world, declared, field_bindings, {s.name: s for s in reads})
    user_params = tuple(n for n in declared if n not in ENGINE_PARAMS and n not in dict(slot_params))

    env: dict[str, Any] = {
        **engine_param_values(world),
        **dict(slot_params),  # count expressions may read them too
        **{k: v for k, v in (params or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
    }
    planned = tuple(_plan_output(slot, env, variant) for slot in outputs)
    names = [o.name for o in planned]
    if policy is ReadbackPolicy.NONE:
        if readback:
            raise _error(f"policy NONE reads nothing back; readback={list(readback)} needs another policy", variant)
        chosen: tuple[str, ...] = ()
    elif readback is None:
        chosen = tuple(names)
    else:
        chosen = tuple(readback)
        bad = [n for n in chosen if n not in names]
        if bad:
            raise _error(f"readback names {bad[0]!r}, which is not an output of this kernel; its outputs: {', '.join(names) or 'none'}", variant)
    if policy is not ReadbackPolicy.NONE and not chosen:
        raise _error(f"policy {policy.name} reads results back, but this kernel declares no output (a read_write buffer with a count, or an append)", variant)
    by_name = {o.name: o for o in planned}
    primary = next((by_name[n] for n in chosen if by_name[n].per_item), by_name[chosen[0]] if chosen else (planned[0] if planned else None))
    shape: tuple[int, ...] = ()
    if primary is None:
        dtype, lanes, out_name, out_index = np.dtype("<u4"), 1, "", -1
    else:
        dtype, lanes, out_name, out_index = primary.dtype, primary.lanes, primary.name, primary.binding
        shape = primary.record_shape if primary.per_item else (0,)  # whole outputs only: no per-item values
    return ProductPlan(
        items=items.name,
        items_index=items.binding,
        fields=field_bindings,
        output=out_name,
        output_index=out_index,
        params_index=lowered.params.binding,
        record_dtype=dtype,
        record_shape=shape,
        record_bytes=dtype.itemsize * int(np.prod(shape, dtype=np.int64)) if primary is not None and primary.per_item else 0,
        engine_params=tuple(engine_params),
        user_params=user_params,
        slot_params=slot_params,
        lanes=lanes,
        outputs=planned,
        readback=chosen,
        inputs=tuple(given),
        domain_count=domain_count,
    )


def _plan_output(slot: Any, env: Mapping[str, Any], where: str | None) -> OutputPlan:
    """An output's records: ``per_item`` when its count is k * n (k records per work item,
    split by chunk when revalidated), else a whole-dispatch output (appends, fixed sizes)."""
    if slot.struct_fields or slot.scalar not in _SCALAR_DTYPES:
        raise _error(f"output {slot.name!r} is {slot.element}; a product reads back f32/i32/u32 scalars and vectors", where, slot.line)
    per_item = 0
    if slot.role == "output" and slot.count is not None:
        expr = parse_expression(slot.count)
        # k * n over every n a dispatch can have is what makes records per item; sampled here
        # (a cap such as min(n, 4) shows past its knee), and checked again on every dispatch.
        samples = (0, 1, 2, 3, 5, 17, 64, 257, 4099, 65_537, 1_048_583)
        try:
            at = [math.ceil(expr.evaluate({**env, "n": n}, {})) for n in samples]
        except Exception:  # reads an input's length: not a multiple of n we can know
            at = []
        if at and at[1] > 0 and all(a == n * at[1] for n, a in zip(samples, at)):
            per_item = at[1]
    return OutputPlan(slot.name, slot.binding, slot.role, _SCALAR_DTYPES[slot.scalar], slot.lanes, per_item, slot.capacity if slot.role == "append" else None)


SLOT_WORDS = "_slot_words"  # <field binding>_slot_words: a param the engine fills (see _slot_params)


def _slot_params(
    variant: str | None, world: Any, declared: Mapping[str, Any], bindings: tuple[FieldBinding, ...], slots: Mapping[str, Any]
) -> tuple[tuple[str, int], ...]:
    """The ``<binding>_slot_words`` params the kernel declares, with their values: the 4-byte
    words one chunk slot takes in that field's mirror. A field of 1- or 2-byte values whose
    chunk is not whole words has padded slots (a uint8 field of 5x5 chunks: 25 bytes in a
    28-byte slot), so ``slot * tile_count`` is not where slot ``slot`` starts; a kernel
    reading such a field as raw words must declare the param (it is refused otherwise)."""
    out = []
    for f in bindings:
        name = f.binding + SLOT_WORDS
        nbytes = world.chunk_nbytes(f.field)
        words = slot_stride(nbytes) // 4
        param = declared.get(name)
        if param is not None:
            if param.type != "u32":
                raise _error(f"param {name!r} is filled by the engine as u32; declare it as type: u32, not {param.type}", variant)
            out.append((name, words))
        elif nbytes % 4 and slots[f.binding].bits:
            # Not refused: a kernel may compute the padded stride itself, ceil(bytes / 4) words.
            log.warning(
                "%s: field %r (%d bytes a chunk) sits in mirror slots of %d bytes (padded to whole words), so slot s does not "
                "start at byte s * %d; declare the param '- { name: %s, type: u32 }' (the engine fills it with %d) and read "
                "slot s from word s * params.%s",
                f"{variant}:{slots[f.binding].line}" if variant else f"binding {f.binding!r}",
                f.field,
                nbytes,
                words * 4,
                nbytes,
                name,
                words,
                name,
            )
    return tuple(out)


def _bind_fields(variant: str | None, world: Any, inputs: list, fields: Any) -> tuple[FieldBinding, ...]:
    if not inputs:
        raise _error("a product kernel reads at least one world field (an access: read buffer)", variant)
    if fields is None:
        mapping = {s.name: s.name for s in inputs}
    elif isinstance(fields, Mapping):
        mapping = dict(fields)
    elif isinstance(fields, str):
        if len(inputs) != 1:
            raise _error(
                f"fields='{fields}' is one field for {len(inputs)} field inputs ({', '.join(s.name for s in inputs)}); pass a list or a mapping", variant
            )
        mapping = {inputs[0].name: fields}
    else:
        names = list(fields)
        if len(names) != len(inputs):
            raise _error(
                f"fields={names} gives {len(names)} fields for {len(inputs)} field inputs "
                f"({', '.join(s.name for s in inputs)}); pass one each, or a mapping binding -> field",
                variant,
            )
        mapping = {s.name: f for s, f in zip(inputs, names)}
    by_name = {s.name: s for s in inputs}
    unknown = [b for b in mapping if b not in by_name]
    if unknown:
        raise _error(f"fields maps binding {unknown[0]!r}, which is not a field input of this kernel; its field inputs: {', '.join(by_name)}", variant)
    missing = [s for s in inputs if s.name not in mapping]
    if missing:
        raise _error(f"field input {missing[0].name!r} is bound to no world field; name it in fields=", variant, missing[0].line)
    out = []
    declared = {spec.name: spec for spec in world.fields}
    for slot in inputs:
        name = mapping[slot.name]
        spec = declared.get(name)
        if spec is None:
            raise _error(
                f"field input {slot.name!r} is bound to {name!r}, which this world does not declare; its fields: {', '.join(declared)}", variant, slot.line
            )
        if slot.bits:
            pass  # raw words: the kernel unpacks narrower or wider values itself
        else:
            want = _FIELD_SCALAR.get(spec.format.name)
            if want != slot.scalar or slot.lanes != 1:
                hint = f"element: {want}" if want else "element: u32 with bits: true (and unpack the values)"
                raise _error(f"field input {slot.name!r} is {slot.element} but field {name!r} holds {spec.format.name}; declare {hint}", variant, slot.line)
        out.append(FieldBinding(slot.name, name, slot.binding, 4 * slot.lanes, slot.role == "inout"))
    return tuple(out)


def engine_param_values(world: Any) -> dict[str, float | int]:
    """The values of :data:`ENGINE_PARAMS` for ``world`` (as the GPU and the fallbacks see them)."""
    shape = world.chunk_shape
    tiles = world.tiles_per_chunk
    return {
        "tile_count": tiles,
        "inv_tile_count": float(np.float32(1.0 / tiles)),
        "chunk_width": shape[-1],
        "chunk_height": shape[-2] if len(shape) > 1 else 1,
        "slot_count": world.max_chunks,
    }


@dataclass(frozen=True)
class ProductWork:
    """What a CPU fallback computes: the same work items its kernel would.

    ``keys``: the chunks, in work-list order (``SUMMARY``/``NONE``: one item each;
    ``FULL_FIELD``: ``tile_count`` items each, the chunk's tiles in C order).
    ``tiles``: ``(key, tile)`` per item for ``SELECTED_TILES`` / ``SELECTED_PATH``.
    ``fields``: binding name -> world field. ``params``: the product's params plus the
    engine-filled ones (``tile_count``, ``inv_tile_count``, ...). ``spec``: the variant's
    specialisation values (e.g. ``{"OP": "min"}``).

    A fallback answers one record per item (an array of ``(items, *record_shape)``, or any
    shape of that size) with the same contract as the kernel.
    """

    policy: ReadbackPolicy
    keys: tuple[int, ...]
    tiles: tuple[tuple[int, tuple[int, ...]], ...]
    fields: Mapping[str, str]
    params: Mapping[str, Any]
    spec: Mapping[str, str]
    record_dtype: np.dtype | None
    record_shape: tuple[int, ...]

    def field(self, binding: str) -> str:
        """The world field bound to ``binding``."""
        return self.fields[binding]

    @property
    def items(self) -> int:
        if self.policy is ReadbackPolicy.FULL_FIELD:
            return len(self.keys) * int(self.params["tile_count"])
        return len(self.tiles) if self.tiles else len(self.keys)


@dataclass(frozen=True)
class ProductResult:
    """Results handed to a product's ``apply`` callback: derived data, current when applied.

    Attributes:
        handle: the product's engine handle.
        generation: the GPU registration generation the results come from (0: the CPU).
        policy: what the values are.
        source: ``"gpu"`` or ``"cpu"`` (the fallback).
        keys: the chunks the values cover, each still at ``versions[i]`` when applied (with
            ``EngineConfig(revalidate="fields")``, and always for a product whose kernel
            writes a mirror (a ``read_write`` field binding): the fields it reads unchanged
            since; its write already happened on the GPU, and running it again over a chunk
            whose other fields changed would apply the write twice).
        values: ``SUMMARY``: ``(len(keys), *record)`` (a ``NONE`` product reads nothing back:
            ``apply`` is never called for it, its CPU fallback's answer too); ``FULL_FIELD``:
            ``(len(keys), *chunk_shape, *record)``; ``SELECTED_*``: ``(len(tiles), *record)``.
            Owned by the callee (a copy).
        tiles: ``(key, tile)`` per value for the selection policies.
        frame: the frame the work was dispatched (or computed) in.
        record_shape: the shape of one record (``()`` for a scalar element, ``(4,)`` for vec4).
        outputs: every output read back, by name (``values`` is the primary one's): per-item
            outputs cut to the applied chunks like ``values``, whole-dispatch outputs (appends
            with their count, fixed sizes) as they came.
        overflow: appends that ran past their capacity, by name: the count the kernel
            attempted (``outputs`` holds the first ``capacity`` records; empty when none did).
    """

    handle: GpuProductHandle
    generation: int
    policy: ReadbackPolicy
    source: str
    keys: tuple[int, ...]
    versions: tuple[int, ...]
    values: np.ndarray = field(repr=False)
    tiles: tuple[tuple[int, tuple[int, ...]], ...] = ()
    frame: int = 0
    record_shape: tuple[int, ...] = ()
    outputs: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)
    overflow: Mapping[str, int] = field(default_factory=dict)

    @property
    def records(self) -> np.ndarray:
        """The values as the kernel wrote them: one record per work item, ``(items, *record)``
        (``values`` differs only for ``FULL_FIELD``, where it is shaped by chunk)."""
        if 0 in self.record_shape:  # only whole-dispatch outputs: no per-item records
            return self.values.reshape(self.values.shape[0] if self.values.ndim else 0, *self.record_shape)
        return self.values.reshape(-1, *self.record_shape)

    def by_chunk(self) -> dict[int, np.ndarray]:
        """Chunk key -> its values (``SUMMARY``, ``FULL_FIELD``, ``NONE``)."""
        if self.tiles:
            raise ProductError(f"{self.policy.name} results are per tile; use by_tile()")
        return {k: self.values[i] for i, k in enumerate(self.keys)}

    def by_tile(self) -> dict[tuple[int, tuple[int, ...]], Any]:
        """``(key, tile)`` -> its value (selection policies)."""
        return {t: self.values[i] for i, t in enumerate(self.tiles)}
