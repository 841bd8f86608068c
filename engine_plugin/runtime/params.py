"""Packing the params uniform with the lowered layout, checking each user value's type."""

from __future__ import annotations

import math
import struct
from typing import Any, Mapping

import numpy as np

from ..errors import DispatchError, in_source
from ..formats import masked_refusal
from ..lowering.casts import exact_integer_bound
from ..lowering.lowered import Lowered
from ..lowering.param_types import F32_MAX
from ..lowering.variants import mapping_of

__all__ = ["ParamsPacker"]

_FMT = {"f32": "<f", "i32": "<i", "u32": "<I"}
_RANGE = {"i32": (-(2**31), 2**31 - 1), "u32": (0, 2**32 - 1)}


class ParamsPacker:
    """Precomputed from a Lowered once; ``pack`` answers the uniform's bytes for one run."""

    def __init__(self, lowered: Lowered, yaml_path: str, param_lines: Mapping[str, int]):
        self.lowered = lowered
        self.yaml_path = yaml_path
        self.size = lowered.params.size
        self.user = [f for f in lowered.params.fields if f.origin == "user"]
        self.user_names = {f.name for f in self.user}
        self.fixed = {f.name: f.offset for f in lowered.params.fields if f.origin != "user"}
        # (name, offset, struct format, lanes, scalar) per scalar/vector field, computed once:
        # pack is per run. Matrices and arrays pack through their ParamType.
        self._user_plan = [(f.name, f.offset, _FMT[f.param_type.scalar], f.param_type.lanes, f.param_type.scalar) for f in self.user if f.param_type.simple]
        self._complex = [(f.name, f.offset, f.param_type) for f in self.user if not f.param_type.simple]
        # The last params set validated (a skip: an equal fingerprint is those very values) and
        # the last bytes packed, keyed by (fingerprint, fixed values): one attribute each, read
        # and replaced whole, so threads sharing a variant never pair one set's key with
        # another's bytes (review helper 147: results_bytes() on an engine thread between a
        # run's check and pack made that run dispatch with the other thread's params).
        self._checked: tuple | None = None
        self._last: tuple[tuple, bytes] | None = None
        self._lines = dict(param_lines)

    def error(self, message: str, name: str | None = None) -> DispatchError:
        line = self._lines.get(name) if name else None
        texts = self.lowered.source_map.texts
        return DispatchError(message, in_source(self.yaml_path, texts[0] if texts else None, line))

    def _as_dict(self, params: Any) -> dict[str, Any]:
        """:func:`~engine_plugin.lowering.variants.mapping_of` ``params``, or a DispatchError
        saying what ``params=`` takes."""
        found = mapping_of(params)
        if found is None:
            shown = "" if isinstance(params, (str, bytes)) else f" {params!r:.60}"
            raise self.error(f"params= maps param names to values (a dict, or (name, value) pairs), not {type(params).__name__}{shown}")
        return found

    def check(self, params: Mapping[str, Any] | None) -> tuple[dict[str, Any], tuple | None]:
        """Validate user params (all present, none unknown, right types) before any GPU work.

        Answers the params (a copy) and their exact fingerprint (None: not fingerprintable),
        which :meth:`pack` takes to reuse the bytes of an identical set."""
        params = self._as_dict(params)
        # A game passes the same params frame after frame: skip re-validating an identical set.
        fingerprint = exact_fingerprint(params)
        if fingerprint is not None and fingerprint == self._checked:
            return params, fingerprint
        unknown = [k for k in params if k not in self.user_names]
        if unknown:
            known = ", ".join(sorted(self.user_names)) or "none"
            raise self.error(f"unknown param {unknown[0]!r}; this kernel's params are: {known}")
        missing = [f.name for f in self.user if f.name not in params]
        if missing:
            raise self.error(f"missing param {missing[0]!r} ({self._type(missing[0])})", missing[0])
        for name, _, _, lanes, scalar in self._user_plan:
            self._check_value(name, scalar, lanes, params[name])
        for name, _, ptype in self._complex:
            reason = ptype.check(params[name])
            if reason:
                raise self.error(f"param {name!r} ({ptype.wgsl}) {reason}", name)
        self._checked = fingerprint
        return params, fingerprint

    def _type(self, name: str) -> str:
        for f in self.user:
            if f.name == name:
                return f.type
        return "?"

    def _check_value(self, name: str, scalar: str, lanes: int, value: Any) -> None:
        masked = masked_refusal(value)
        if masked is not None:
            raise self.error(f"param {name!r} ({self._type(name)}) takes numbers, not {masked}", name)
        values = _as_list(value)
        if values is None or len(values) != lanes:
            want = scalar if lanes == 1 else f"{lanes} values ({self._type(name)})"
            raise self.error(f"param {name!r} takes {want}, not {value!r}", name)
        for v in values:
            if isinstance(v, (bool, np.bool_)):
                raise self.error(f"param {name!r} ({self._type(name)}) takes numbers, not {v!r}", name)
            if scalar == "f32":
                if not isinstance(v, (int, float, np.integer, np.floating)):
                    raise self.error(f"param {name!r} ({self._type(name)}) takes numbers, not {v!r}", name)
                if not _fits_f32(v):
                    shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
                    raise self.error(f"param {name!r} ({self._type(name)}): {shown} is past f32's range (+-{F32_MAX:.7g}; it would be inf)", name)
                if isinstance(v, (float, np.floating)) and 0 < abs(float(v)) < 1e-44 and np.float32(v) == 0:  # (compared in Python first: cheap)
                    # As a host array's are (review helper 174): 1e-50 ran as 0.0.
                    raise self.error(f"param {name!r} ({self._type(name)}): {v!r} is below f32's smallest (1.4e-45; it would be 0)", name)
                if isinstance(v, (int, np.integer)) and not -_EXACT_F32_INT <= int(v) <= _EXACT_F32_INT and int(np.float32(v)) != int(v):
                    # As a host array's integers are (review helper 156): 4294967295 ran as 4294967296.
                    raise self.error(
                        f"param {name!r} ({self._type(name)}): the integer {int(v)} is not exactly an f32 (it would be {int(np.float32(v))}); "
                        "pass a float if rounding is what you want",
                        name,
                    )
            else:
                if isinstance(v, (float, np.floating)) and not float(v).is_integer():
                    raise self.error(f"param {name!r} is {self._type(name)}, not {v!r}: pass an integer", name)
                if not isinstance(v, (int, float, np.integer, np.floating)):
                    raise self.error(f"param {name!r} ({self._type(name)}) takes integers, not {v!r}", name)
                lo, hi = _RANGE[scalar]
                if not lo <= int(v) <= hi:
                    raise self.error(f"param {name!r} is {self._type(name)}: {v!r} is out of range [{lo}, {hi}]", name)

    def pack(self, params: Mapping[str, Any], fixed: Mapping[str, int], fingerprint: tuple | None) -> bytes:
        """The uniform's bytes for ``params`` (as :meth:`check` answered them, with their
        ``fingerprint``) and the lowering's own ``fixed`` fields."""
        # The same params and sizes frame after frame pack to the same bytes: reuse them.
        memo_key = (fingerprint, tuple(fixed.values())) if fingerprint is not None else None
        last = self._last
        if memo_key is not None and last is not None and last[0] == memo_key:
            return last[1]
        buf = self._pack(params, fixed)
        if memo_key is not None:
            self._last = (memo_key, buf)
        return buf

    def _pack(self, params: Mapping[str, Any], fixed: Mapping[str, int]) -> bytes:
        buf = bytearray(self.size)
        for name, value in fixed.items():
            off = self.fixed.get(name)
            if off is not None:
                struct.pack_into("<I", buf, off, int(value) & 0xFFFFFFFF)
        for name, offset, fmt, lanes, scalar in self._user_plan:
            value = params[name]
            if scalar == "f32":
                # A float32 keeps its own bits (float() would quiet a signalling NaN: review
                # helper 182), as an array param and a storage buffer keep them.
                if type(value) is np.float32:
                    struct.pack_into("<I", buf, offset, int(value.view(np.uint32)))
                    continue
                if type(value) is np.ndarray and value.dtype == _F32 and value.size == lanes:
                    buf[offset : offset + 4 * lanes] = value.tobytes()
                    continue
            if lanes == 1 and not isinstance(value, (list, tuple, np.ndarray)):
                struct.pack_into(fmt, buf, offset, float(value) if scalar == "f32" else int(value))
                continue
            for lane, v in enumerate(_as_list(value)):  # type: ignore[arg-type]
                if type(v) is np.float32:
                    struct.pack_into("<I", buf, offset + 4 * lane, int(v.view(np.uint32)))
                else:
                    struct.pack_into(fmt, buf, offset + 4 * lane, float(v) if scalar == "f32" else int(v))
        for name, offset, ptype in self._complex:
            ptype.pack_into(buf, offset, params[name])
        return bytes(buf)

    def scalars(self, params: Mapping[str, Any]) -> dict[str, float | int]:
        """Scalar params by name, for count expressions."""
        out = {}
        for name, _, _, lanes, scalar in self._user_plan:
            if lanes == 1:
                v = params[name]
                if isinstance(v, (list, tuple, np.ndarray)):  # one value, as check() takes it
                    v = _as_list(v)[0]  # type: ignore[index]
                out[name] = float(v) if scalar == "f32" else int(v)
        return out


def exact_fingerprint(params: Mapping[str, Any] | None) -> tuple | None:
    """Params as an exact, hashable value: type, dtype and bytes of each. ``==`` on the values
    would call -0.0 and 0.0, or True and 1, the same and reuse the wrong bytes or checks.
    None when a value has no exact form (nothing cached may then match)."""
    if not params:
        return ()
    out = []
    for k in sorted(params):
        found = _exact(params[k])
        if found is None:
            return None
        out.append((k, found))
    return tuple(out)


def _exact(value: Any) -> Any:
    """``value``'s exact form (its type and bits, a list's element by element), or None. A
    list as one numpy array went through float64: [2**53 + 1, 0.5] was [2**53, 0.5], and a
    signalling NaN of an np.float32 a quiet one, so a set differing only so skipped its checks
    and ran with the other's bytes (review helper 215)."""
    kind = type(value)
    if isinstance(value, float):
        return (kind, struct.pack("<d", value))  # -0.0 and NaN payloads kept
    if isinstance(value, int):  # bool too, as its own type: [True, 2] is refused, [1, 2] is not
        return (kind, int(value))
    if isinstance(value, np.generic):
        return None if value.dtype.kind == "O" else (kind, value.dtype.str, value.tobytes())
    if isinstance(value, np.ndarray):
        # (a masked array has no exact form: its check refuses it, every time)
        return None if value.dtype.kind == "O" or isinstance(value, np.ma.MaskedArray) else (kind, value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        items = tuple(_exact(v) for v in value)
        return None if any(item is None for item in items) else (kind, items)
    return None


def _as_list(value: Any) -> list | None:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, np.ndarray):
        return value.reshape(-1).tolist() if value.ndim <= 1 else None
    return [value]


_F32 = np.dtype("<f4")
_EXACT_F32_INT = exact_integer_bound(np.dtype(np.float32))  # every integer of at most this magnitude is an f32


def _fits_f32(value: Any) -> bool:
    """Whether a number packs as f32: inf and nan do (asked for), a finite value past f32's
    range does not (struct refuses it)."""
    try:
        wide = float(value)
        struct.pack("<f", wide)
    except (OverflowError, struct.error):
        return False
    # A long double past float64's range is inf as a float, but finite as given.
    return not (math.isinf(wide) and isinstance(value, np.floating) and bool(np.isfinite(value)))
