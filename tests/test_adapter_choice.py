"""Which adapter the package takes (review helper 190): wgpu's OpenGL backend lacks what the
packaged kernels need, and an adapter list may name one CPU device under Vulkan and OpenGL;
OpenGL is taken only by name. With no usable adapter a bake says so once, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine_plugin.device import context
from engine_plugin.errors import NoAdapterError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Adapter:
    def __init__(self, backend: str, kind: str = "CPU"):
        self.info = {"device": f"llvmpipe ({backend})", "adapter_type": kind, "backend_type": backend}


def _listing(monkeypatch, adapters):
    monkeypatch.setattr(context.wgpu.gpu, "enumerate_adapters_sync", lambda: list(adapters))
    monkeypatch.delenv("ENGINE_PLUGIN_ADAPTER", raising=False)


def test_vulkan_is_taken_over_opengl_whatever_the_order(monkeypatch):
    gl, vk = _Adapter("OpenGL"), _Adapter("Vulkan")
    _listing(monkeypatch, [gl, vk])
    assert context._pick_adapter() is vk
    _listing(monkeypatch, [vk, gl])
    assert context._pick_adapter() is vk


def test_only_opengl_is_no_adapter_unless_named(monkeypatch):
    gl = _Adapter("OpenGL")
    _listing(monkeypatch, [gl])
    with pytest.raises(NoAdapterError, match="only an OpenGL adapter was found.*ENGINE_PLUGIN_ADAPTER=opengl"):
        context._pick_adapter()
    monkeypatch.setenv("ENGINE_PLUGIN_ADAPTER", "opengl")
    assert context._pick_adapter() is gl


def test_a_bake_without_a_usable_adapter_is_one_environment_error(tmp_path):
    path = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p)  # the machine's own packages stay found
    env = dict(os.environ, VK_ICD_FILENAMES=str(tmp_path / "none.json"), PYTHONPATH=path)
    env.pop("VK_DRIVER_FILES", None)  # the newer name of the same setting (the H200's script sets it)
    env.pop("ENGINE_PLUGIN_ADAPTER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "engine_plugin.cli", "bake", "--builtin", "--cache", str(tmp_path / "c"), "--jobs", "1"],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    # lavapipe's OpenGL twin where EGL is installed, nothing where it is not
    assert len(lines) == 1 and ("only an OpenGL adapter" in lines[0] or "no wgpu adapter" in lines[0]), proc.stderr
    assert "variant" not in proc.stderr  # said once, not a failure per variant
    assert not list((tmp_path / "c").glob("**/*.msgpack")) if (tmp_path / "c").exists() else True


def test_a_repeated_error_without_a_place_is_named_whole():
    from engine_plugin.bake.driver import _Bake
    from engine_plugin.bake.report import BakeReport
    from engine_plugin.bake.worker import Failure
    from engine_plugin.lowering import VariantSpec

    said = []

    class Progress:
        def failure(self, headline, detail):
            said.append(headline)

    bake = _Bake.__new__(_Bake)
    _Bake.__init__(bake, cache=None, progress=Progress(), report=BakeReport("c"))  # type: ignore[arg-type]
    text = "no wgpu adapter found; install a Vulkan driver (Debian: apt-get install libvulkan1 mesa-vulkan-drivers)"
    for _ in range(3):
        bake.announce("a.computeShader", VariantSpec(()), Failure("NoAdapterError", text, text))
    placed = "a/bindings.yaml:3:5: unknown key 'acess'"
    for _ in range(2):
        bake.announce("a.computeShader", VariantSpec(()), Failure("SchemaError", placed, placed, "a/bindings.yaml", 3, 5))
    bake.repeats()
    assert f"{text}: the same error in 2 more variant(s)" in said, said
    assert "a/bindings.yaml:3:5: the same error in 1 more variant(s)" in said, said


def test_a_name_both_twins_share_takes_vulkan_and_only_opengl_names_opengl(monkeypatch):
    # Review helper 191: ENGINE_PLUGIN_ADAPTER=llvmpipe (or cpu) took the OpenGL twin listed first.
    gl, vk = _Adapter("OpenGL"), _Adapter("Vulkan")
    for name in ("llvmpipe", "cpu"):
        _listing(monkeypatch, [gl, vk])
        monkeypatch.setenv("ENGINE_PLUGIN_ADAPTER", name)
        assert context._pick_adapter() is vk
    monkeypatch.setenv("ENGINE_PLUGIN_ADAPTER", "opengl")
    assert context._pick_adapter() is gl
    gles = _Adapter("OpenGLES")
    _listing(monkeypatch, [gles])
    with pytest.raises(NoAdapterError, match="only an OpenGL adapter"):
        context._pick_adapter()
