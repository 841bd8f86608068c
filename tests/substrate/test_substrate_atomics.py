"""Atomic pages end to end: every NAME_atomic_* op under contention, checked against numpy.

4,096 invocations hit 5 slots (about 820 each). Integers use their full 32-bit range, so
add wraps exactly as two's complement does; f32 values are multiples of 1/4 small enough
that every summation order gives the same sum (the kernel still declares float_order).
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.substrate import Substrate

from substrate_kernels import ATOMIC_WGSL, ATOMIC_YAML, make

N, SLOTS = 4096, 5
DTYPE = {"u32": np.uint32, "i32": np.int32, "f32": np.float32}
COLUMNS = ("acc_add", "acc_min", "acc_max", "acc_xchg", "acc_and", "acc_or", "acc_xor")


def _values(t: str, rng) -> np.ndarray:
    if t == "f32":
        return (rng.integers(-256, 256, N) / 4).astype(np.float32)
    return rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32).view(DTYPE[t])


def _initial(t: str) -> dict[str, np.ndarray]:
    dt = DTYPE[t]
    big, small = (np.float32(1e30), np.float32(-1e30)) if t == "f32" else (np.iinfo(dt).max, np.iinfo(dt).min)
    ones = np.float32(0) if t == "f32" else dt(-1) if t == "i32" else dt(0xFFFFFFFF)
    return {
        "acc_add": np.zeros(SLOTS, dt),
        "acc_min": np.full(SLOTS, big, dt),
        "acc_max": np.full(SLOTS, small, dt),
        "acc_xchg": (np.arange(SLOTS) + 1000).astype(dt),  # sentinels no invocation writes
        "acc_and": np.full(SLOTS, ones, dt),
        "acc_or": np.zeros(SLOTS, dt),
        "acc_xor": np.zeros(SLOTS, dt),
    }


@pytest.mark.parametrize("t", ["u32", "i32", "f32"])
def test_atomic_ops_on_contended_slots_match_numpy(gpu, t):
    v = make("substrate_atomics", ATOMIC_YAML, ATOMIC_WGSL, T=t)
    rng = np.random.default_rng({"u32": 1, "i32": 2, "f32": 3}[t])
    vals = _values(t, rng)
    slots = ((np.arange(N) * 7) % SLOTS).astype(np.uint32)
    s = Substrate(gpu, page_bytes=4096, label=f"atomics {t}")
    init = _initial(t)
    with s.with_page_group("acc"):
        cols = {name: s.upload(t, init[name], atomic=True) for name in COLUMNS}
    assert len({h.page for h in cols.values()}) == 1 and s.page_info(cols["acc_add"].page).atomic
    run = v.run(n=N, inputs={"vals": vals, "slots": slots, **cols})
    got = dict(zip(COLUMNS, s.read_many([cols[c] for c in COLUMNS])))
    olds = abi.read(run.outputs["olds"])

    per_slot = [vals[slots == k] for k in range(SLOTS)]
    if t == "f32":
        want_add = np.array([p.astype(np.float64).sum() for p in per_slot], np.float32)
    else:  # wrap like the GPU: sum modulo 2**32, then reinterpret
        want_add = np.array([int(p.view(np.uint32).astype(np.uint64).sum()) % 2**32 for p in per_slot], np.uint64)
        want_add = want_add.astype(np.uint32).view(DTYPE[t])
    np.testing.assert_array_equal(got["acc_add"], want_add)
    np.testing.assert_array_equal(got["acc_min"], [p.min() for p in per_slot])
    np.testing.assert_array_equal(got["acc_max"], [p.max() for p in per_slot])
    if t != "f32":
        np.testing.assert_array_equal(got["acc_and"], [np.bitwise_and.reduce(p) & init["acc_and"][0] for p in per_slot])
        np.testing.assert_array_equal(got["acc_or"], [np.bitwise_or.reduce(p) for p in per_slot])
        np.testing.assert_array_equal(got["acc_xor"], [np.bitwise_xor.reduce(p) for p in per_slot])
    else:  # f32 columns have no bitwise ops; the body leaves them alone
        for c in ("acc_and", "acc_or", "acc_xor"):
            np.testing.assert_array_equal(got[c], init[c])
    # Exchange: the final value is one an invocation wrote, and the values handed back plus
    # the final one are exactly the initial value and every value written (a chain).
    for k in range(SLOTS):
        final = got["acc_xchg"][k]
        assert final in per_slot[k]
        chain = np.sort(np.concatenate([olds[slots == k], [final]]))
        np.testing.assert_array_equal(chain, np.sort(np.concatenate([[init["acc_xchg"][k]], per_slot[k]])))
    s.close()
