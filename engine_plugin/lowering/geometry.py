"""Dispatch geometry: a domain of 1 to 3 dimensions, its workgroups, and how the host folds
them into what the device can launch. Pure Python; the one place that knows the params the
generated entry point reads (every caller -- variant.run, abi.batch, the engine -- packs
:func:`dispatch_fields`, nothing else names them).

The host launches ``T`` = the domain's workgroup count as a tight fold ``(px, py, pz)`` of
at most ``max_groups`` a dimension (wasting less than one row of groups, never the 6-100%
of a ``gx = 65535`` fold). The generated entry point turns the physical workgroup id back
into the logical one, so ``global_invocation_id``, ``workgroup_id`` and ``num_workgroups``
mean the domain's coordinates whatever the fold; padding workgroups return at once.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Domain", "as_domain", "fold_groups", "dispatch_fields", "GEOMETRY_FIELDS"]

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
    return hasattr(v, "__index__") and not isinstance(v, float)


def logical_groups(domain: Domain, workgroup: tuple[int, int, int]) -> tuple[int, int, int]:
    return tuple(-(-e // w) for e, w in zip(domain.extent, workgroup))  # type: ignore[return-value]


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


def dispatch_fields(domain: Domain, workgroup: tuple[int, int, int], max_groups: int) -> tuple[dict[str, int], tuple[int, int, int]] | None:
    """(params fields for the entry point, the physical workgroups to dispatch), or None when
    the device cannot launch that many workgroups."""
    gx, gy, gz = logical_groups(domain, workgroup)
    physical = fold_groups(gx * gy * gz, max_groups)
    if physical is None:
        return None
    nx, ny, nz = domain.extent
    values = (nx, ny, nz, gx, gy, gz, max(physical[0], 1), max(physical[1], 1))
    return dict(zip(GEOMETRY_FIELDS, values)), physical
