"""When casting host values by value into a binding's storage type would change them."""

from __future__ import annotations

import numpy as np

__all__ = ["cast_refusal", "exact_integer_bound"]

_CHUNK = 1 << 20  # elements checked at once for a fraction


def cast_refusal(arr: np.ndarray, target: np.dtype, underflow: bool = True) -> str | None:
    """Why casting ``arr`` to ``target`` by value would change a value (wrap, drop a
    fraction, overflow to inf), or None. A float array for an integer target must hold whole
    numbers: numpy (and WGSL) would truncate 1.5 to 1 without a word (review helper 126), where
    a param of the same value is refused. ``underflow``: a nonzero float too small for a float
    target (it would become 0) is refused too (host data); off for a CPU fallback's results,
    which stand for a kernel's, whose f32 arithmetic makes those 0 itself."""
    if arr.size == 0:
        return None
    if arr.dtype.kind not in "fiub":
        return f"dtype {arr.dtype} is not numeric"
    if target.kind in "iu":
        info = np.iinfo(target)
        if arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)):
                return f"a NaN or infinity cannot be cast to {target.name}"
            # In slices: a whole-array mask and truncated copy cost 10 bytes an element at once
            # (review helper 132); a flat view of a contiguous array copies nothing.
            flat = arr.reshape(-1)
            for start in range(0, flat.size, _CHUNK):
                part = flat[start : start + _CHUNK]
                fractional = part != np.trunc(part)
                if fractional.any():
                    bad = part[int(np.argmax(fractional))]  # str(): 0.9 as its own dtype prints it
                    return f"value {bad!s} is not a whole number, and {target.name} holds integers; round it yourself (e.g. np.rint(arr).astype(np.{target.name})) if that is what you want"
        # As Python numbers: numpy compares a float32 with an int in float32, where
        # 2147483647 is 2147483648.0 (a value just past the range would pass).
        lo, hi = arr.min().item(), arr.max().item()
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            return (
                f"value {bad} is outside {target.name}'s range [{info.min}, {info.max}]; cast it yourself "
                f"(e.g. arr.astype(np.{target.name})) if wrapping is what you want"
            )
    elif target.kind == "f" and arr.dtype.kind in "iu":
        return _inexact_integer(arr, target)
    elif target.kind == "f" and arr.dtype.kind == "f" and arr.dtype.itemsize > target.itemsize:
        # Any narrowing: f64 to f32, and f32 or f64 to an f16 texture (review helper 214: a
        # float32 texel of 1e-8 reached an rgba16float binding as 0.0 without a word).
        finite = arr[np.isfinite(arr)]
        with np.errstate(over="ignore"):  # what rounds to inf, not what exceeds the max (3.4028235e38 rounds to f32's)
            beyond = finite.size and bool(np.isinf(finite.astype(target)).any())
        if beyond:
            bits = 8 * target.itemsize
            return f"a value is beyond f{bits}'s range (it would become infinity); scale it or cast it yourself"
        # The other end of the range: a value too small for an f32 became 0.0 without a word
        # (review helper 174), as one too big would have become infinity.
        if underflow:
            with np.errstate(under="ignore"):
                lost = (finite != 0) & (finite.astype(target) == 0)
            if lost.any():
                bad = finite[int(np.argmax(lost))]
                smallest = np.finfo(target).smallest_subnormal
                return f"value {bad!s} is below {target.name}'s smallest ({smallest:.3g}): it would become 0; scale it or cast it yourself"
    return None


def exact_integer_bound(target: np.dtype) -> int:
    """The magnitude up to which every integer is exactly a ``target`` float (2^24 for f32,
    2^11 for f16)."""
    return 1 << (np.finfo(target).nmant + 1)


def _inexact_integer(arr: np.ndarray, target: np.dtype) -> str | None:
    """Why integers in ``arr`` would round as ``target`` floats (past 2^24 for f32, 2^11 for
    f16: a float texture's texels), or None: a u32 id of 4294967295 reached the kernel as
    4294967296.0 without a word, where a fraction into an integer binding is refused (review
    helpers 151, 156)."""
    exact = exact_integer_bound(target)
    bits = exact.bit_length() - 1
    lo, hi = arr.min().item(), arr.max().item()
    if -exact <= lo and hi <= exact:
        return None
    wide = np.dtype(np.int64) if arr.dtype.kind == "i" else np.dtype(np.uint64)
    limit = float(np.iinfo(wide).max) + 1.0  # 2^63 or 2^64: a float there no longer fits ``wide``
    flat = arr.reshape(-1)
    for start in range(0, flat.size, _CHUNK):
        part = flat[start : start + _CHUNK]
        with np.errstate(over="ignore", invalid="ignore"):  # past f16's range: inf, refused below
            as_float = part.astype(target)
            fits = (as_float < limit) & (as_float >= -limit)
        back = np.where(fits, as_float, 0).astype(wide)
        changed = ~fits | (back != part.astype(wide))
        if changed.any():
            bad = part[int(np.argmax(changed))].item()
            return (
                f"value {bad} is not exactly a {target.name} (integers past 2^{bits} round: it would become "
                f"{as_float[int(np.argmax(changed))].item():.0f}); cast it yourself (arr.astype(np.{target.name})) if rounding is what "
                "you want, or declare the binding's element an integer type"
            )
    return None
