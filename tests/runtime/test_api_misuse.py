"""Misused public ABI calls raise a PluginError naming what the argument takes (SPEC section 2:
every raised error derives from PluginError), never a raw TypeError/AttributeError from deep
inside (review helper 151)."""

from __future__ import annotations

import os

import pytest

from engine_plugin import abi
from engine_plugin.errors import CompileError, DispatchError, LoweringError, PluginError, SchemaError, SpecializationError

pytestmark = pytest.mark.gpu

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = os.path.join(REPO, "assets", "seed", "seed.computeShader")


def _texts():
    with open(os.path.join(SEED, "bindings.yaml")) as f:
        yaml = f.read()
    with open(os.path.join(SEED, "kernel.wgsl")) as f:
        wgsl = f.read()
    return yaml, wgsl


def test_misused_calls_raise_plugin_errors_naming_what_they_take():
    yaml, wgsl = _texts()
    schema = abi.parse(yaml)
    prog = abi.program(key="t151/misuse", schema=schema, wgsl=wgsl)
    variant = prog.variant()
    cases = [
        (lambda: prog.variant(specialize="T"), SpecializationError, "specialize= maps specialisation names to values"),
        (lambda: prog.variant(columns=["pos"]), SpecializationError, "columns= maps a columns table"),
        (lambda: prog.variant(columns="cols"), SpecializationError, "columns= maps a columns table"),
        (lambda: variant.run(n=4, params=[1]), DispatchError, "params= maps param names to values"),
        (lambda: abi.lower(schema, wgsl, "T=f32"), SpecializationError, "specialize= maps"),
        (lambda: abi.is_extended(yaml), SchemaError, "abi.parse(bindings_yaml_text)"),
        (lambda: abi.compile("k", "src"), CompileError, "abi.compile takes a lowered variant"),
        (lambda: abi.program(key="t151/text", schema=yaml, wgsl=wgsl), SchemaError, "not str"),
        (lambda: abi.program(key="t151/none", schema=schema, wgsl=None), LoweringError, "the kernel body's text"),
    ]
    for call, kind, said in cases:
        with pytest.raises(PluginError) as info:
            call()
        assert isinstance(info.value, kind) and said in str(info.value), (kind, info.value)
    # What they take still works.
    assert abi.is_extended(schema) is True
    assert abi.compile("k", abi.lower(schema, wgsl, {})) == abi.compile("k", abi.lower(schema, wgsl, None))
