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
    # What they take still works, pair iterables too (review helper 156: refused for a while).
    from engine_plugin.bench.axpy import AXPY_WGSL, AXPY_YAML

    packer = abi.program(key="t151/axpy", schema=abi.parse(AXPY_YAML), wgsl=AXPY_WGSL).variant()._packer
    params = {"a": 2.0}
    for given in (list(params.items()), params.items(), zip(["a"], [2.0]), ((k, v) for k, v in params.items())):
        assert packer.check(given)[0] == params
    assert prog.variant(specialize=[("T", "i32")]) is prog.variant(specialize={"T": "i32"})
    assert prog.variant(specialize={"T": "i32"}.items()) is prog.variant(specialize={"T": "i32"})
    assert abi.is_extended(schema) is True
    assert abi.compile("k", abi.lower(schema, wgsl, {})) == abi.compile("k", abi.lower(schema, wgsl, None))


def test_an_integer_param_an_f32_would_round_is_refused():
    # Review helper 156: params={"a": 4294967295} ran as 4294967296.0 while the same value in
    # an f32 array is refused (a cast by value that changes a value). A float is the caller's choice.
    from engine_plugin.bench.axpy import AXPY_WGSL, AXPY_YAML

    packer = abi.program(key="t151/axpy", schema=abi.parse(AXPY_YAML), wgsl=AXPY_WGSL).variant()._packer
    for bad in (4294967295, 16777217, -16777217):
        with pytest.raises(DispatchError, match=f"the integer {bad} is not exactly an f32"):
            packer.check({"a": bad})
    for fine in (16777216, 2**31, -(2**40), 4294967295.0, 3):
        assert packer.check({"a": fine})[0] == {"a": fine}
