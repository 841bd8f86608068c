"""A product's outputs as arrays: decoded from its readback bytes, checked from its CPU
fallback, and cut down to the work items whose chunks are still current.

Per-item outputs (``per_item`` records a work item, see :class:`~.contract.OutputPlan`) are
arrays of ``(items, *record_shape)``; whole-dispatch outputs are ``(count, lanes)`` or
``(count,)``, an append's count being its counter clamped to its capacity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..lowering import parse_expression
from ..lowering.casts import cast_refusal
from .contract import OutputPlan, ProductError, ProductPlan

__all__ = ["decode_outputs", "fallback_outputs", "fallback_overflow", "readback_extent", "select_items", "has_whole_outputs"]


def has_whole_outputs(plan: ProductPlan) -> bool:
    """Whether a whole-dispatch output is read back: results then apply all or nothing."""
    return any(not o.per_item for o in plan.read_outputs)


def readback_extent(plan: ProductPlan, layout: Mapping[str, Any]) -> int:
    """Bytes from the start of the results area that hold every output read back."""
    end = 4
    for o in plan.read_outputs:
        placed = layout[o.name]
        end = max(end, placed.offset + placed.capacity * o.dtype.itemsize * o.lanes)
        if placed.counter_offset is not None:
            end = max(end, placed.counter_offset + 4)
    return -(-end // 4) * 4


def decode_outputs(plan: ProductPlan, layout: Mapping[str, Any], data: Any, items: int) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Every output read back, copied out of the readback bytes ``data``; and the appends
    that ran past their capacity, by name: the count they attempted (their values hold the
    first ``capacity``; SPEC: an overflow is reported, nothing is lost silently)."""
    raw = memoryview(data).cast("B")
    out: dict[str, np.ndarray] = {}
    overflow: dict[str, int] = {}
    for o in plan.read_outputs:
        placed = layout[o.name]
        count = placed.count
        if placed.counter_offset is not None:
            attempted = int(np.frombuffer(raw, dtype="<u4", count=1, offset=placed.counter_offset)[0])
            count = min(attempted, placed.capacity)
            if attempted > placed.capacity:
                overflow[o.name] = attempted
        values = np.frombuffer(raw, dtype=o.dtype, count=count * o.lanes, offset=placed.offset).copy()
        out[o.name] = _shape(o, values, items)
    return out, overflow


def _shape(o: OutputPlan, values: np.ndarray, items: int) -> np.ndarray:
    if o.per_item:
        return values.reshape(items, *o.record_shape)
    return values.reshape(-1, o.lanes) if o.lanes > 1 else values


def fallback_overflow(plan: ProductPlan, outputs: dict[str, np.ndarray], items: int, params: Mapping[str, Any]) -> dict[str, int]:
    """Cap a CPU fallback's append outputs at the capacity the kernel's would have (its
    expression over ``items`` and the params), as a GPU result is capped; answers the appends
    that ran past it, by name: how many records the fallback answered. An expression the
    fallback cannot evaluate (it reads a binding's length) leaves the output as answered."""
    env: dict[str, float] = {}
    for k, v in params.items():  # scalars as the runtime packs them: a one-element list or array too
        values = np.asarray(v) if not isinstance(v, (str, bytes)) else None
        if values is not None and values.size == 1 and values.dtype.kind in "iuf":
            env[k] = float(values.reshape(-1)[0])
    env.update(n=items, nx=items, ny=1, nz=1)
    overflow: dict[str, int] = {}
    for o in plan.outputs:
        values = outputs.get(o.name)
        if o.role != "append" or o.capacity is None or values is None:
            continue
        try:
            capacity = max(0, math.ceil(parse_expression(o.capacity).evaluate(env, {})))
        except Exception:  # reads what a fallback does not know (len(binding)): as answered
            continue
        if len(values) > capacity:
            overflow[o.name] = len(values)
            outputs[o.name] = values[:capacity]
    return overflow


def fallback_outputs(plan: ProductPlan, answer: Any, items: int, key: Any) -> dict[str, np.ndarray]:
    """A CPU fallback's answer as outputs: an array (the primary output) or a mapping of
    output name to array; each checked against the kernel's contract.

    Raises:
        ProductError: a missing output or a wrong number of values.
    """
    given = dict(answer) if isinstance(answer, Mapping) else {plan.output: answer}
    out: dict[str, np.ndarray] = {}
    for o in plan.read_outputs:
        if o.name not in given:
            raise ProductError(f"the CPU fallback of {key!r} answered no {o.name!r}; it answers {{output: values}} for {', '.join(plan.readback)}")
        values = np.asarray(given[o.name])
        if o.per_item:
            want = items * int(np.prod(o.record_shape, dtype=np.int64))
            if values.size != want:
                raise ProductError(
                    f"the CPU fallback of {key!r} answered {values.size} values of {o.name!r} for {items} items "
                    f"of {o.record_shape or 'one'} value(s); it follows the kernel's contract"
                )
        elif values.size % o.lanes:
            raise ProductError(f"the CPU fallback of {key!r} answered {values.size} values of {o.name!r}, not whole records of {o.lanes}")
        # By value, with the refusals a host array gets (a cast would wrap -1 into a u32, make
        # NaN 0 or 1e300 inf, silently), and no fractions into an integer output (an answer
        # is the kernel's, which writes integers there).
        target = np.dtype(o.dtype)
        reason = None
        if values.dtype != target:
            if values.dtype.kind not in "fiub":
                reason = f"values of {values.dtype} are not numbers"
            else:
                reason = cast_refusal(values, target, underflow=False)  # fractions into an integer output too
        if reason is not None:
            raise ProductError(f"the CPU fallback of {key!r} answered values of {o.name!r} its {target.name} output cannot hold: {reason}")
        out[o.name] = _shape(o, values.astype(o.dtype, copy=False).reshape(-1), items)
    return out


def select_items(plan: ProductPlan, outputs: Mapping[str, np.ndarray], keep: np.ndarray | None, by_chunk: tuple[int, ...] | None) -> dict[str, np.ndarray]:
    """Per-item outputs cut to the items ``keep`` marks (None: all) and, with ``by_chunk``
    (``FULL_FIELD``: chunk count and chunk shape), shaped by chunk; whole outputs as they are."""
    plans = {o.name: o for o in plan.outputs}
    out: dict[str, np.ndarray] = {}
    for name, values in outputs.items():
        o = plans[name]
        if not o.per_item:
            out[name] = values
            continue
        if by_chunk is not None:
            values = values.reshape(by_chunk[0], *by_chunk[1:], *o.record_shape)
        out[name] = values if keep is None else values[keep]
    return out
