"""Dispatch geometry: a domain of 1 to 3 dimensions, its workgroups, and how the host folds
them into what the device can launch. Pure Python; the one place that knows the params the
generated entry point reads (every caller -- variant.run, abi.batch, the engine -- packs
:func:`dispatch_fields`, nothing else names them).

The host launches ``P = min(T, cap)`` of the domain's ``T`` workgroups as a tight fold
``(px, py, pz)`` of at most ``max_groups`` a dimension (``px * py * pz - P`` is fewer than
``pz * (py + 1)`` groups: one plane, ``pz = 1``, wastes less than a column of ``py``; never the
6-100% of a ``gx = 65535`` fold). The generated entry point
(:mod:`.entry`) is a grid-stride loop over logical workgroups: physical workgroup ``p``
serves ``p, p + P, ...``, so ``global_invocation_id``, ``workgroup_id`` and ``num_workgroups``
mean the domain's coordinates whatever the fold and the cap; padding workgroups do nothing.

``cap`` (:func:`group_cap`) is a bounded multiple of what fills the device: past it, more
workgroups only cost launches (a chip launches ~1.66 G workgroups/s, which caps a
64-invocation, one-f32-per-invocation kernel near 850 GB/s whatever its memory does).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Domain", "as_domain", "fold_groups", "dispatch_fields", "group_cap", "wrapping_axis", "GEOMETRY_FIELDS", "INVOCATION_BUDGET"]

# Params the entry point reads, in layout order (all u32).
GEOMETRY_FIELDS = ("zero_nx", "zero_ny", "zero_nz", "zero_gx", "zero_gy", "zero_gz", "zero_px", "zero_py")


@dataclass(frozen=True)
class Domain:
    """The dispatch domain: extents per axis (1 for unused axes) and the element count."""

    extent: tuple[int, int, int]

    @property
    def count(self) -> int:
        x, y, z = self.extent
        return x * y * z


def as_domain(n: object) -> Domain | None:
    """``n`` (an int, or a tuple/list of 1-3 ints) as a Domain; None when it is not one."""
    if isinstance(n, bool):
        return None
    if isinstance(n, (tuple, list)):
        if not 1 <= len(n) <= 3 or any(isinstance(v, bool) or not _is_int(v) or int(v) < 0 for v in n):  # type: ignore[arg-type]
            return None
        dims = [int(v) for v in n] + [1] * (3 - len(n))  # type: ignore[call-overload]
        return Domain((dims[0], dims[1], dims[2]))
    if _is_int(n) and int(n) >= 0:  # type: ignore[call-overload]
        return Domain((int(n), 1, 1))  # type: ignore[call-overload]
    return None


def _is_int(v: object) -> bool:
    """An int, or what indexes as one (a numpy integer, a 0-d integer array); not a float or
    an array of several values."""
    if isinstance(v, float) or not hasattr(v, "__index__"):
        return False
    try:
        v.__index__()
        int(v)  # type: ignore[call-overload]  # (a masked 0-d array indexes as its data, yet has no value)
    except Exception:  # TypeError; numpy.ma's MaskError for a masked 0-d array (review helper 238)
        return False
    return True


def logical_groups(domain: Domain, workgroup: tuple[int, int, int]) -> tuple[int, int, int]:
    return tuple(-(-e // w) for e, w in zip(domain.extent, workgroup))  # type: ignore[return-value]


def wrapping_axis(domain: Domain, workgroup: tuple[int, int, int]) -> int | None:
    """The first axis (0-2) whose extent, rounded up to whole workgroups, passes 2**32
    invocations, or None. There the last workgroup's ``global_invocation_id`` wraps past the
    u32 the kernel sees, back to 0, 1, ...: a padding invocation would pass ``gid < n`` and
    compute the first elements again (review helper 96)."""
    for axis, (e, w) in enumerate(zip(domain.extent, workgroup)):
        if -(-e // w) * w > 1 << 32:
            return axis
    return None


def fold_groups(total: int, max_groups: int) -> tuple[int, int, int] | None:
    """A tight fold of ``total`` workgroups into (px, py, pz), each at most ``max_groups``;
    None when even a full cube cannot hold them."""
    if total == 0:
        return (0, 0, 0)
    if total <= max_groups:
        return (total, 1, 1)
    pz = -(-total // (max_groups * max_groups))
    if pz > max_groups:
        return None
    per_plane = -(-total // pz)
    py = -(-per_plane // max_groups)
    px = -(-per_plane // py)
    return (px, py, pz)


# Invocations launched at most per dispatch, by adapter kind. A GPU: 2**23 invocations, about
# 31 waves of a 132-SM H200 at full occupancy (2,048 resident invocations an SM), 248
# workgroups of 256 an SM: on the H200 a vec4 grid-stride axpy reached 4,191 GB/s with 32,768
# groups of 256 against 4,056 with 8,192 (tools/bench/results/h200_2026-11-30_kernels_run1),
# while launching 32,768 groups costs ~20 us at ~1.66 G workgroups/s, overlapped with the
# work. Smaller GPUs get more waves. A CPU adapter (lavapipe) gets one workgroup per logical
# group: llvmpipe ends an invocation's loops after 65,535 iterations in all, silently, so a
# grid-stride loop there multiplies what a kernel's own loops may do before it computes wrong
# numbers (4M elements of a 255-step loop: 16,384 wrong at 2**14 invocations); launching them
# all costs lavapipe nothing measurable. Its 2**31 keeps every launch (fold included) within
# the u32 the entry point counts workgroups in. Tests lower these to force the loop.
INVOCATION_BUDGET = {"gpu": 1 << 23, "cpu": 1 << 31}


def group_cap(workgroup: tuple[int, int, int], adapter: str = "") -> int:
    """The most workgroups worth launching for one dispatch of ``workgroup``-sized groups on
    ``adapter`` (its summary, e.g. ``"NVIDIA H200 (DiscreteGPU, Vulkan)"``; a ``CPU`` adapter
    gets the CPU budget). Past it the generated grid-stride loop gives each workgroup more."""
    budget = INVOCATION_BUDGET["cpu" if "CPU" in adapter else "gpu"]
    invocations = max(1, workgroup[0] * workgroup[1] * workgroup[2])
    return max(1, budget // invocations)


def dispatch_fields(
    domain: Domain, workgroup: tuple[int, int, int], max_groups: int, cap: int | None = None
) -> tuple[dict[str, int], tuple[int, int, int]] | None:
    """(params fields for the entry point, the physical workgroups to dispatch), or None when
    the device cannot launch that many workgroups. ``cap``: launch at most this many
    workgroups (the entry point loops over the rest); None launches one per logical group."""
    gx, gy, gz = logical_groups(domain, workgroup)
    total = gx * gy * gz
    physical = fold_groups(total if cap is None else min(total, max(1, cap)), max_groups)
    if physical is None:
        return None
    nx, ny, nz = domain.extent
    values = (nx, ny, nz, gx, gy, gz, max(physical[0], 1), max(physical[1], 1))
    return dict(zip(GEOMETRY_FIELDS, values)), physical
