"""Data flows one way: a lower layer never imports a higher one (checked from the source's imports)."""

import ast
import os

import pytest

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "engine_plugin")

# What each package may import from engine_plugin (besides itself and errors), and whether wgpu.
ALLOWED = {
    "lowering": (set(), False),
    "cache": ({"lowering"}, False),
    "world": ({"formats"}, False),
    "substrate": ({"lowering", "gpu.device", "arrays"}, True),
    "runtime": ({"lowering", "gpu.device", "gpu.mapping", "gpu.loss", "gpu.guard", "gpu.flags", "gpu.readback", "substrate", "arrays"}, True),
    "assets": ({"lowering", "cache", "runtime", "gpu.device"}, True),
    "bake": ({"lowering", "cache", "assets", "runtime", "gpu.device"}, False),
}


def imports_of(path: str, package: str) -> set[str]:
    """engine_plugin sub-packages (dotted, e.g. 'gpu.device') and top-level third-party names imported."""
    with open(path) as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add((node.module or "").split(".")[0])
            else:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                found.add("ep:" + target)
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_below_it(package):
    allowed, wgpu_ok = ALLOWED[package]
    folder = os.path.join(PKG, package)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        for imp in imports_of(os.path.join(folder, name), package):
            if imp == "wgpu":
                assert wgpu_ok, f"{package}/{name} imports wgpu"
            if not imp.startswith("ep:"):
                continue
            target = imp[3:]
            if target in ("", "errors") or target == package or target.startswith(package + "."):
                continue
            assert any(target == a or target.startswith(a + ".") for a in allowed), f"{package}/{name} imports engine_plugin.{target}"


def test_the_abi_facade_exports_a_sorted_all_that_resolves():
    from engine_plugin import abi

    assert abi.__all__ == sorted(abi.__all__)
    for name in abi.__all__:
        assert hasattr(abi, name), name
