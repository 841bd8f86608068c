#!/usr/bin/env python3
"""The interim main job (until the demo lands): validate every variant of every sample asset on
the GPU, then run the reference kernel and the particles kernel and check them against numpy."""

from __future__ import annotations

import sys
import time

import numpy as np

from engine_plugin import abi
from engine_plugin.assets.folder import find_assets, read_asset_folder
from engine_plugin.device.context import get_context
from engine_plugin.runtime.compile import compile_lowered


def main(root: str = "assets") -> int:
    ctx = get_context()
    print(f"device: {ctx.adapter_name}")
    total = failed = 0
    t0 = time.perf_counter()
    for folder in find_assets(root):
        src = read_asset_folder(folder, root=root)
        schema = abi.parse(src.yaml_text, src.yaml_path)
        for spec in abi.enumerate_variants(schema):
            total += 1
            try:
                compile_lowered(abi.lower(schema, src.wgsl_text, spec, wgsl_path=src.wgsl_path, modules=src.module_texts))
            except Exception as exc:  # report every failing variant, keep going
                failed += 1
                print(f"FAILED {folder} {spec.label()}: {exc}")
    print(f"validated {total - failed}/{total} variants in {time.perf_counter() - t0:.2f} s")

    src = read_asset_folder(f"{root}/samples/reference.computeShader")
    program = abi.program(key="samples/reference", schema=abi.parse(src.yaml_text, src.yaml_path), wgsl=src.wgsl_text, wgsl_path=src.wgsl_path)
    variant = program.variant(specialize={"T": "vec3<f32>", "FOLD": "max"})
    values = np.random.default_rng(0).uniform(-1, 1, (100_000, 3)).astype(np.float32)
    weight = np.full(100_000, 2.0, np.float32)
    run = variant.run(n=len(values), inputs={"src": values, "cols": abi.table({"weight": weight})})
    got = abi.read(run.outputs["dst"])
    want = np.maximum(values * 2, values[np.minimum(np.arange(len(values)) + 1, len(values) - 1)])
    ok = np.allclose(got, want)
    print(f"reference kernel (T=vec3<f32>, FOLD=max) over {len(values):,} elements: {'matches numpy' if ok else 'MISMATCH'}; "
          f"hits count {run.outputs['hits'].count}")
    return 0 if ok and not failed else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
