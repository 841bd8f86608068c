"""The product contract: how a compiled variant's bindings meet the world and the engine.

A product kernel is an ordinary ``.computeShader`` whose bindings follow four rules:

* **a work list** the engine fills each dispatch: ``chunks`` (u32 mirror slots, one work item
  a chunk) for ``SUMMARY`` / ``NONE`` products, or ``tiles`` (u32 global tile indices,
  ``slot * tile_count + tile``, one work item a tile) for ``SELECTED_TILES``,
  ``SELECTED_PATH`` and ``FULL_FIELD`` products. ``zero_n()`` is the item count.
* **field inputs**: every other ``access: read`` buffer is bound to a world field's whole
  GPU mirror (slot-major, ``tile_count`` values a slot), by ``fields=``.
* **one output**: a ``read_write`` buffer with a ``count``, written one element (the
  *record*) per work item, at the item's index; the engine owns it and reads records back.
* **params** the engine fills when the schema declares them: ``tile_count`` (u32),
  ``inv_tile_count`` (f32, rounded once on the host), ``chunk_width``, ``chunk_height``,
  ``slot_count`` (u32). Other params are the product's own (``params=``).

Appends, tables, pages/columns and domain counts are not part of the contract (yet): a
variant that declares them is refused with a :class:`ProductError` naming the binding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import PluginError, Span
from ..gpu.descriptors import ReadbackPolicy
from ..gpu.handles import GpuProductHandle

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

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.field for f in self.fields))


def _error(message: str, where: str | None, line: int | None = None) -> ProductError:
    return ProductError(message, Span(where, line or None) if where else None)


def plan_product(lowered: Any, world: Any, fields: Mapping[str, str] | Sequence[str] | None, policy: ReadbackPolicy, where: str | None = None) -> ProductPlan:
    """Check a lowered variant against the product contract and ``world``; answer its plan.

    Args:
        lowered: the variant's :class:`~engine_plugin.lowering.Lowered` (no device needed).
        fields: binding name -> world field, or a list of world fields taken by the field
            inputs in binding order, or None (each field input names a world field).
        where: the asset's bindings.yaml path, for error locations.
    Raises:
        ProductError: naming the binding (and its bindings.yaml line) that breaks the contract.
    """
    variant = where
    if lowered.columns:
        c = lowered.columns[0]
        raise _error(f"column {c.name!r}: page/column bindings are not part of the product contract", variant, c.line)
    items = None
    inputs, outputs = [], []
    for slot in lowered.host_slots:
        if slot.role == "input":
            if slot.name in (CHUNK_ITEMS, TILE_ITEMS):
                if items is not None:
                    raise _error(f"binding {slot.name!r}: a product has one work list, {items.name!r} or {slot.name!r}, not both", variant, slot.line)
                items = slot
            else:
                inputs.append(slot)
        elif slot.role == "output":
            outputs.append(slot)
        else:
            what = {
                "append": "append outputs",
                "table": "columns tables",
                "page": "pages",
                "domain_count": "domain counts",
                "inout": "read_write inputs without a count",
            }.get(slot.role, slot.role)
            raise _error(
                f"binding {slot.name!r}: {what} are not part of the product contract; a product reads a work list and world fields and writes one output",
                variant,
                slot.line,
            )
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
    if len(outputs) != 1:
        names = ", ".join(repr(s.name) for s in outputs) or "none"
        raise _error(
            f"a product kernel writes exactly one output (read_write buffer with a count); this one has {names}",
            variant,
            outputs[1].line if len(outputs) > 1 else None,
        )
    out = outputs[0]
    field_bindings = _bind_fields(variant, world, inputs, fields)

    declared = {f.name: f for f in lowered.params.fields if f.origin == "user"}
    engine_params = []
    for name, wgsl in ENGINE_PARAMS.items():
        f = declared.get(name)
        if f is None:
            continue
        if f.type != wgsl:
            raise _error(f"param {name!r} is filled by the engine as {wgsl}; declare it as type: {wgsl}, not {f.type}", variant)
        engine_params.append(name)
    user_params = tuple(n for n in declared if n not in ENGINE_PARAMS)
    dtype = _SCALAR_DTYPES[out.scalar]
    shape = (out.lanes,) if out.lanes > 1 else ()
    return ProductPlan(
        items=items.name,
        items_index=items.binding,
        fields=field_bindings,
        output=out.name,
        output_index=out.binding,
        params_index=lowered.params.binding,
        record_dtype=dtype,
        record_shape=shape,
        record_bytes=dtype.itemsize * out.lanes,
        engine_params=tuple(engine_params),
        user_params=user_params,
        lanes=out.lanes,
    )


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
        out.append(FieldBinding(slot.name, name, slot.binding, 4 * slot.lanes))
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
        keys: the chunks the values cover, each still at ``versions[i]`` when applied.
        values: ``SUMMARY``/``NONE``: ``(len(keys), *record)``; ``FULL_FIELD``:
            ``(len(keys), *chunk_shape, *record)``; ``SELECTED_*``: ``(len(tiles), *record)``.
            Owned by the callee (a copy).
        tiles: ``(key, tile)`` per value for the selection policies.
        frame: the frame the work was dispatched (or computed) in.
        record_shape: the shape of one record (``()`` for a scalar element, ``(4,)`` for vec4).
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

    @property
    def records(self) -> np.ndarray:
        """The values as the kernel wrote them: one record per work item, ``(items, *record)``
        (``values`` differs only for ``FULL_FIELD``, where it is shaped by chunk)."""
        return self.values.reshape(-1, *self.record_shape)

    def by_chunk(self) -> dict[int, np.ndarray]:
        """Chunk key -> its values (``SUMMARY``, ``FULL_FIELD``, ``NONE``)."""
        if self.tiles:
            raise ProductError(f"{self.policy.name} results are per tile; use by_tile()")
        return {k: self.values[i] for i, k in enumerate(self.keys)}

    def by_tile(self) -> dict[tuple[int, tuple[int, ...]], Any]:
        """``(key, tile)`` -> its value (selection policies)."""
        return {t: self.values[i] for i, t in enumerate(self.tiles)}
