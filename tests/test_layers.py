"""Data flows one way: a lower layer never imports a higher one (checked from the source's imports)."""

import ast
import os

import pytest

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "engine_plugin")

# What each package may import from engine_plugin (besides itself, errors, files and formats: the
# ground floor), and whether it may import wgpu. Every package is listed: a new one must
# take its place here. Bottom up: lowering, cache, world (pure); device; substrate, runtime (the
# execution core); assets, bake; gpu (the SPEC section 3 backend layer); engine; the front ends.
GROUND = {"errors", "files", "formats"}
ALLOWED = {
    "lowering": (set(), False),
    "cache": ({"lowering"}, False),
    "world": (set(), False),
    "device": (set(), True),
    "substrate": ({"lowering", "device", "arrays"}, True),
    "runtime": ({"lowering", "device", "substrate", "arrays"}, True),
    "assets": ({"lowering", "cache", "device", "runtime"}, True),
    "bake": ({"lowering", "cache", "assets", "runtime", "device"}, False),
    "gpu": ({"device", "runtime", "world"}, False),
    "engine": ({"lowering", "device", "runtime", "assets", "gpu", "world"}, False),
    "demo": ({"assets", "device", "engine", "gpu", "world", "runtime", "lowering"}, True),
    "bench": ({"assets", "commands", "device", "engine", "gpu", "lowering", "runtime", "world"}, True),
    "commands": ({"assets", "bake", "cache", "demo", "lowering", "extras", "engine", "gpu", "device", "runtime", "bench", "world"}, False),
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
            if target == "" or target.split(".")[0] in GROUND or target == package or target.startswith(package + "."):
                continue
            assert any(target == a or target.startswith(a + ".") for a in allowed), f"{package}/{name} imports engine_plugin.{target}"


def test_every_package_has_its_place_in_the_layer_table():
    packages = {n for n in os.listdir(PKG) if os.path.isfile(os.path.join(PKG, n, "__init__.py"))}  # kernels/ is data
    assert packages == set(ALLOWED), f"unlisted: {sorted(packages - set(ALLOWED))}, gone: {sorted(set(ALLOWED) - packages)}"


def test_the_ground_floor_imports_nothing_above_it():
    for name in sorted(GROUND):
        for imp in imports_of(os.path.join(PKG, f"{name}.py"), ""):
            assert not imp.startswith("ep:") or imp[3:].lstrip(".") in GROUND, f"{name}.py imports {imp}"
            assert imp != "wgpu", f"{name}.py imports wgpu"


def test_the_abi_facade_exports_a_sorted_all_that_resolves():
    from engine_plugin import abi

    assert abi.__all__ == sorted(abi.__all__)
    for name in abi.__all__:
        assert hasattr(abi, name), name


def test_the_gpu_package_exports_spec_section_3_names():
    # Review helper 235: SPEC section 3 names StaleSpanError with the upload descriptors; it was
    # only in engine_plugin.errors.
    import engine_plugin.gpu as gpu
    from engine_plugin.errors import PluginError, StaleSpanError

    for name in ("GpuFieldFormat", "FieldMirrorDesc", "field_mirror_desc", "UploadDesc", "upload_desc", "StaleSpanError", "GpuProductHandle",
                 "DispatchDesc", "ReadbackPolicy", "ReadbackDesc", "GpuCapabilities", "GpuBackend", "NoGpuBackend", "WgpuBackend", "WgpuBackendConfig"):
        assert name in gpu.__all__ and getattr(gpu, name) is not None, name
    assert gpu.StaleSpanError is StaleSpanError and issubclass(gpu.StaleSpanError, PluginError)
