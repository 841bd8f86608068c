"""Texture bindings: sampled textures (2d, 2d_array, 3d) with samplers, storage textures
allocated from size expressions, read back with abi.read, chained into the next run."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import DispatchError, SchemaError

pytestmark = pytest.mark.gpu

BLUR_YAML = """\
bindings:
  - { name: img, kind: texture }
  - { name: smp, kind: sampler, filter: linear, address: clamp }
  - { name: out, kind: storage_texture, format: rgba32float, size: [nx, ny] }
workgroup: [8, 8]
"""
# webgpu-samples' blur idea: bilinear taps between texels, here four half-texel offsets.
BLUR_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (zero_index(gid) >= zero_n()) { return; }
    let dims = vec2<f32>(textureDimensions(img));
    let c = (vec2<f32>(gid.xy) + vec2<f32>(0.5)) / dims;
    let h = vec2<f32>(0.5) / dims;
    var acc = vec4<f32>(0.0);
    acc += textureSampleLevel(img, smp, c + vec2<f32>(-h.x, -h.y), 0.0);
    acc += textureSampleLevel(img, smp, c + vec2<f32>(h.x, -h.y), 0.0);
    acc += textureSampleLevel(img, smp, c + vec2<f32>(-h.x, h.y), 0.0);
    acc += textureSampleLevel(img, smp, c + vec2<f32>(h.x, h.y), 0.0);
    textureStore(out, gid.xy, acc * 0.25);
}
"""


def bilinear(image: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Reference bilinear filter, clamp-to-edge, texel centres at (i + 0.5) / size."""
    h, w = image.shape[:2]
    x = u * w - 0.5
    y = v * h - 0.5
    x0 = np.floor(x).astype(int)
    y0 = np.floor(y).astype(int)
    fx = (x - x0)[..., None]
    fy = (y - y0)[..., None]
    cx = lambda i: np.clip(i, 0, w - 1)  # noqa: E731
    cy = lambda i: np.clip(i, 0, h - 1)  # noqa: E731
    a = image[cy(y0), cx(x0)]
    b = image[cy(y0), cx(x0 + 1)]
    c = image[cy(y0 + 1), cx(x0)]
    d = image[cy(y0 + 1), cx(x0 + 1)]
    return (a * (1 - fx) + b * fx) * (1 - fy) + (c * (1 - fx) + d * fx) * fy


MIDPOINT_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (zero_index(gid) >= zero_n()) { return; }
    // half way between texel 0 (black) and texel 1 (white) of a 2x1 image
    textureStore(out, gid.xy, textureSampleLevel(img, smp, vec2<f32>(0.5, 0.5), 0.0));
}
"""


@pytest.mark.parametrize("first, second", [("nearest", "linear"), ("linear", "nearest")])
def test_a_program_whose_schema_changed_only_its_sampler_filter_samples_with_the_new_one(first, second):
    """The filter changes the bind group layout, not the WGSL: a program made anew under the
    same key (what a hot reload does) got the old layout's compiled pipeline, and every run
    raised a raw wgpu validation error (review helper 137)."""
    image = np.zeros((1, 2, 4), np.uint8)
    image[0, 1] = 255
    for kind in (first, second, first):
        schema = abi.parse(BLUR_YAML.replace("filter: linear", f"filter: {kind}"))
        variant = abi.program(key="t17/midpoint", schema=schema, wgsl=MIDPOINT_WGSL).variant()
        got = abi.read(variant.run(n=(1, 1), inputs={"img": image}).outputs["out"])
        value = float(got[0, 0, 0])
        if kind == "nearest":
            assert value in (0.0, 1.0), (kind, got[0, 0])
        else:  # a blend of the two texels (filtered with 8 bits of weight on lavapipe: 128/255)
            assert abs(value - 0.5) < 0.01, (kind, got[0, 0])


def test_a_blur_with_a_real_linear_sampler_matches_a_reference_bilinear_filter():
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, (19, 23, 4)).astype(np.uint8)
    blur = abi.program(key="t17/blur", schema=abi.parse(BLUR_YAML), wgsl=BLUR_WGSL).variant()
    run = blur.run(n=(23, 19), inputs={"img": image})
    got = abi.read(run.outputs["out"])
    assert got.shape == (19, 23, 4) and got.dtype == np.float32
    ref_image = image.astype(np.float64) / 255.0
    ys, xs = np.mgrid[0:19, 0:23]
    u, v = (xs + 0.5) / 23, (ys + 0.5) / 19
    hu, hv = 0.5 / 23, 0.5 / 19
    want = sum(bilinear(ref_image, u + du, v + dv) for du in (-hu, hu) for dv in (-hv, hv)) / 4
    np.testing.assert_allclose(got, want, atol=2.5 / 255)  # GPUs filter with a few bits of weight precision


COPY_YAML = """\
bindings:
  - { name: src, kind: texture, sample: SAMPLE }
  - { name: out, kind: storage_texture, format: FORMAT, size: [nx, ny] }
workgroup: [8, 8]
"""
COPY_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (zero_index(gid) >= zero_n() || gid.x % 2u == 1u) { return; }
    textureStore(out, gid.xy, textureLoad(src, gid.xy, 0) * TWO);
}
"""


def copy(sample: str, fmt: str, two: str):
    yaml = COPY_YAML.replace("SAMPLE", sample).replace("FORMAT", fmt)
    return abi.program(key=f"t17/copy/{fmt}", schema=abi.parse(yaml), wgsl=COPY_WGSL.replace("TWO", two)).variant()


def test_an_output_texture_starts_as_zeros_and_chains_into_the_next_run():
    image = np.arange(6 * 5 * 4, dtype=np.float32).reshape(6, 5, 4)
    double = copy("float", "rgba32float", "2.0")
    first = double.run(n=(5, 6), inputs={"src": image}).outputs["out"]
    got = abi.read(first)
    np.testing.assert_array_equal(got[:, 0::2], image[:, 0::2] * 2)
    np.testing.assert_array_equal(got[:, 1::2], 0)  # never written: zeros
    second = abi.read(double.run(n=(5, 6), inputs={"src": first}).outputs["out"])
    np.testing.assert_array_equal(second[:, 0::2], image[:, 0::2] * 4)


def test_integer_textures_sample_as_their_type_and_a_mismatch_is_refused():
    data = np.arange(4 * 4, dtype=np.uint32).reshape(4, 4)
    v = copy("uint", "r32uint", "2u")
    np.testing.assert_array_equal(abi.read(v.run(n=(4, 4), inputs={"src": data}).outputs["out"])[..., 0][:, 0::2], data[:, 0::2] * 2)
    with pytest.raises(DispatchError, match="samples uint texels, but a rgba8unorm texture holds float"):
        v.run(n=(4, 4), inputs={"src": np.zeros((4, 4, 4), np.uint8)})


VOLUME_YAML = """\
bindings:
  - { name: vol, kind: texture, dim: DIM }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
workgroup: [4, 4, 4]
"""
VOLUME_WGSL = """\
@compute @workgroup_size(4, 4, 4)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, LOAD.x);
}
"""


@pytest.mark.parametrize("dim,load", [("3d", "textureLoad(vol, gid, 0)"), ("2d_array", "textureLoad(vol, gid.xy, gid.z, 0)")])
def test_3d_and_array_textures_read_every_texel(dim, load):
    data = np.random.default_rng(1).random((3, 5, 6)).astype(np.float32)  # (depth | layers, h, w)
    v = abi.program(key=f"t17/vol/{dim}", schema=abi.parse(VOLUME_YAML.replace("DIM", dim)), wgsl=VOLUME_WGSL.replace("LOAD", load)).variant()
    got = abi.read(v.run(n=(6, 5, 3), inputs={"vol": data}).outputs["dst"])
    np.testing.assert_array_equal(got, data.ravel())


@pytest.mark.parametrize("yaml,message", [
    (BLUR_YAML.replace("format: rgba32float, ", ""), "needs 'format'"),
    (BLUR_YAML.replace("format: rgba32float", "format: rgb8"), "format must be one of"),
    (BLUR_YAML.replace("filter: linear", "filter: cubic"), "filter must be one of"),
    (BLUR_YAML.replace("size: [nx, ny]", "size: [w, h]"), "unknown name 'w'"),
    (BLUR_YAML.replace("kind: texture }", "kind: texture, format: r32float }"), "does not apply to kind texture"),
])
def test_bad_texture_bindings_are_refused_at_their_line(yaml, message):
    with pytest.raises(SchemaError, match=message):
        abi.parse(yaml)


def test_texture_runs_keep_no_dropped_texture_alive():
    import gc

    import wgpu

    double = copy("float", "rgba32float", "2.0")
    image = np.ones((8, 8, 4), np.float32)

    def textures() -> int:
        gc.collect()
        return wgpu.diagnostics.object_counts.get_dict()["Texture"]["count"]

    abi.read(double.run(n=(8, 8), inputs={"src": image}).outputs["out"])
    before = textures()
    for _ in range(40):
        abi.read(double.run(n=(8, 8), inputs={"src": image}).outputs["out"])
    assert textures() <= before + 2  # each run's upload and output go with the run


def test_a_bgra8_storage_texture_reads_back_in_rgba_order_and_numpy_feeds_a_storage_binding():
    # Review helper 40: abi.read of a bgra8unorm output swapped B and R; a numpy array handed to
    # a read or read_write storage texture raised a raw wgpu error (no STORAGE_BINDING usage).
    yaml = 'bindings:\n  - { name: out, kind: storage_texture, format: bgra8unorm, size: [nx, ny] }\nworkgroup: [8, 8]\n'
    wgsl = (
        "@compute @workgroup_size(8, 8)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    if (zero_index(gid) >= zero_n()) { return; }\n    textureStore(out, gid.xy, vec4<f32>(1.0, 0.0, 0.2, 0.6));\n}\n"
    )
    v = abi.program(key="t/bgra_out", schema=abi.parse(yaml, "t/bgra_out/bindings.yaml"), wgsl=wgsl).variant()
    assert abi.read(v.run(n=(2, 2)).outputs["out"])[0, 0].tolist() == [255, 0, 51, 153]
    for access in ("read", "read_write"):
        yaml = (
            f"bindings:\n  - {{ name: img, kind: storage_texture, format: r32float, access: {access} }}\n"
            '  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }\nworkgroup: [8, 8]\n'
        )
        wgsl = (
            "@compute @workgroup_size(8, 8)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
            "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    dst_set(i, textureLoad(img, gid.xy).x);\n}\n"
        )
        v = abi.program(key=f"t/storage_in_{access}", schema=abi.parse(yaml, "t/storage_in/bindings.yaml"), wgsl=wgsl).variant()
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        np.testing.assert_array_equal(abi.read(v.run(n=(4, 3), inputs={"img": a}).outputs["dst"]), a.reshape(-1))


def _rw_texture_variant(key: str, name: str, stored: str):
    """A variant over an 8x8-grouped grid whose one binding ``name`` is a read_write r32float
    storage texture; each texel becomes ``stored`` (a WGSL vec4<f32> expression; ``i`` is
    the texel's index)."""
    yaml = f"bindings:\n  - {{ name: {name}, kind: storage_texture, format: r32float, access: read_write }}\nworkgroup: [8, 8]\n"
    body = (
        "@compute @workgroup_size(8, 8)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n"
        f"    textureStore({name}, gid.xy, {stored});\n}}\n"
    )
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=body).variant()


def test_a_read_write_storage_texture_given_numpy_answers_the_texture_the_kernel_wrote():
    # The data went up into a texture the run made, the kernel wrote it, and no output held
    # it: the writes were unreachable (a read_write buffer given numpy answers its Output).
    variant = _rw_texture_variant("t/storage_rw_numpy", "img", "textureLoad(img, gid.xy) * 2.0 + vec4<f32>(1.0)")
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    for how in ("inputs", "outputs"):
        run = variant.run((4, 3), **{how: {"img": host}})
        np.testing.assert_array_equal(abi.read(run.outputs["img"])[..., 0], host * 2 + 1)
    np.testing.assert_array_equal(host, np.arange(12, dtype=np.float32).reshape(3, 4))  # the caller's array untouched


def test_a_read_write_storage_texture_chained_from_an_earlier_run_is_answered_again():
    # Review helper 106: an accumulation loop (cur = run.outputs["acc"]) got a KeyError on its
    # second frame: only host data handed to the binding was answered, while a read_write
    # buffer is answered whatever it was given. A caller's own GPUTexture is answered too.
    variant = _rw_texture_variant("t/storage_rw_chain", "acc", "textureLoad(acc, gid.xy) + vec4<f32>(f32(i))")
    cur = variant.run((4, 3), inputs={"acc": np.zeros((3, 4), np.float32)}).outputs["acc"]
    for _ in range(3):
        cur = variant.run((4, 3), inputs={"acc": cur}).outputs["acc"]
    index = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(abi.read(cur)[..., 0], index * 4)
    run = variant.run((4, 3), outputs={"acc": cur.texture})  # the caller's own texture
    assert run.outputs["acc"].texture is cur.texture
    np.testing.assert_array_equal(abi.read(run.outputs["acc"])[..., 0], index * 5)


@pytest.mark.parametrize(
    "value,message",
    [
        (np.zeros((2, 3), np.int16), "no texture format holds int16"),
        (np.zeros((2, 3, 5), np.float32), "with 1, 2, 3 or 4 channels"),
        (np.zeros((3, 0), np.float32), "is empty"),
        (np.full((2, 2), 1e300), "beyond f32's range"),
        ("buffer", "a GPUBuffer is no texture 'src'"),
        ("layers", "has 4 layers"),
    ],
)
def test_a_texture_input_the_binding_cannot_take_is_refused_at_the_bindings_line(value, message):
    # Review helper 83: these named no file or line (a GPUBuffer was reported as "not ()", and
    # a 4-layer texture was read through its first layer only).
    import wgpu

    v = copy("float", "rgba32float", "2.0")
    if isinstance(value, str) and value == "buffer":
        value = abi.device().create_buffer(size=64, usage=wgpu.BufferUsage.STORAGE)
    elif isinstance(value, str):
        value = abi.device().create_texture(size=(4, 4, 4), format="rgba8unorm", usage=wgpu.TextureUsage.TEXTURE_BINDING)
    with pytest.raises(DispatchError, match=message) as info:
        v.run(n=(4, 4), inputs={"src": value})
    assert info.value.span is not None and info.value.span.line == 2, info.value


def test_textures_a_storage_binding_or_a_read_cannot_take_are_dispatch_errors():
    # Review helper 157: a mipmapped texture for a storage binding and abi.read of a texture
    # without COPY_SRC drew wgpu's raw GPUValidationError; a given output texture smaller than
    # the binding's size took the run and dropped the writes past it without a word.
    import wgpu

    from engine_plugin.errors import DispatchError

    dev, usage = abi.device(), wgpu.TextureUsage
    gen = abi.program(
        key="t157/gen",
        schema=abi.parse("bindings:\n  - { name: o, kind: storage_texture, format: rgba32float, size: [nx, ny] }\nworkgroup: [8, 8]\n", "t157/gen/bindings.yaml"),
        wgsl="@compute @workgroup_size(8, 8)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    if (zero_index(gid) >= zero_n()) { return; }\n    textureStore(o, gid.xy, vec4<f32>(1.0));\n}\n",
    ).variant()
    mipped = dev.create_texture(size=(8, 8, 1), format="rgba32float", mip_level_count=2, usage=usage.STORAGE_BINDING | usage.COPY_SRC, label="mipped")
    with pytest.raises(DispatchError, match="binds one mip level; the texture 'mipped' has 2") as info:
        gen.run(n=(8, 8), outputs={"o": mipped})
    assert info.value.span.path.endswith("bindings.yaml") and info.value.span.line == 2
    small = dev.create_texture(size=(2, 2, 1), format="rgba32float", usage=usage.STORAGE_BINDING | usage.COPY_SRC, label="small")
    with pytest.raises(DispatchError, match="is 2x2x1 texels; this run's size for 'o' is 8x8x1"):
        gen.run(n=(8, 8), outputs={"o": small})
    nocopy = dev.create_texture(size=(8, 8, 1), format="rgba32float", usage=usage.STORAGE_BINDING, label="nocopy")
    out = gen.run(n=(8, 8), outputs={"o": nocopy}).outputs["o"]
    with pytest.raises(DispatchError, match="lacks COPY_SRC usage"):
        abi.read(out)
    # A texture that fits is taken and written whole.
    fits = dev.create_texture(size=(8, 8, 1), format="rgba32float", usage=usage.STORAGE_BINDING | usage.COPY_SRC, label="fits")
    assert float(abi.read(gen.run(n=(8, 8), outputs={"o": fits}).outputs["o"]).sum()) == 8 * 8 * 4


def test_a_texture_past_one_readback_buffer_is_read_in_parts(monkeypatch):
    # Its rows padded to 256 bytes made a staging buffer past the device's limit (a texture
    # itself under it): wgpu's raw validation error at abi.read (review helper 181). Read in
    # parts of whole rows; here the limit is made small (lavapipe's takes 2 GiB to reach).
    from engine_plugin.device.context import get_context

    ctx = get_context()
    image = np.random.default_rng(2).random((37, 11, 4)).astype(np.float32)  # 11 x 16 B = 176 B a row: pitch 256
    out = copy("float", "rgba32float", "1.0").run(n=(11, 37), inputs={"src": image}).outputs["out"]
    whole = abi.read(out)
    real, made = ctx.limit, []
    monkeypatch.setattr(ctx, "limit", lambda name: 1000 if name == "max-buffer-size" else real(name))  # 3 rows a part
    create = type(ctx.device).create_buffer

    def spy(device, **kw):
        if kw.get("label") == "texture read":
            made.append(kw["size"])
        return create(device, **kw)

    monkeypatch.setattr(type(ctx.device), "create_buffer", spy)
    np.testing.assert_array_equal(abi.read(out), whole)
    assert made and max(made) <= 1000, made  # every staging buffer within the limit
    np.testing.assert_array_equal(whole[:, 0::2], image[:, 0::2])
    data = np.random.default_rng(3).random((3, 5, 6, 4)).astype(np.float32)  # a 3-D texture: layers and rows in parts
    vol = ctx.device.create_texture(size=(6, 5, 3), format="rgba32float", usage=0x1 | 0x2 | 0x4, dimension="3d")
    ctx.queue.write_texture({"texture": vol}, data, {"bytes_per_row": 6 * 16, "rows_per_image": 5}, (6, 5, 3))
    np.testing.assert_array_equal(abi.read(vol), data)


def test_a_texture_of_a_format_abi_read_does_not_read_is_a_dispatch_error():
    from engine_plugin.device.context import get_context

    ctx = get_context()
    tex = ctx.device.create_texture(size=(2, 2, 1), format="rgb10a2unorm", usage=0x1 | 0x2 | 0x4)
    with pytest.raises(DispatchError, match="does not read its format rgb10a2unorm"):
        abi.read(tex)


def test_a_texture_the_device_cannot_make_is_a_dispatch_error_at_its_binding():
    # 2 GB of rgba32float texels: wgpu's raw validation error ("Not enough memory left") with
    # no place of the user's (review helper 181).
    yaml = "bindings:\n  - { name: out, kind: storage_texture, format: rgba32float, size: [16384, 8200] }\nworkgroup: [8, 8]\n"
    wgsl = (
        "@compute @workgroup_size(8, 8)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    if (zero_index(gid) >= zero_n()) { return; }\n    textureStore(out, gid.xy, vec4<f32>(1.0));\n}\n"
    )
    from engine_plugin.device.context import get_context

    v = abi.program(key="t17/oom", schema=abi.parse(yaml, "oom/bindings.yaml"), wgsl=wgsl).variant()
    try:
        v.run(n=(8, 8))
    except DispatchError as err:
        assert "texture 'out' of size (16384, 8200, 1)" in str(err) and "cannot be made on this device" in str(err)
        assert (err.span.path, err.span.line) == ("oom/bindings.yaml", 2)
    else:  # a GPU with the memory makes it (the H200); lavapipe never does
        assert "CPU" not in get_context().adapter_name, "lavapipe made a 2 GB texture"


def test_an_input_handed_to_a_sampler_is_refused_not_ignored():
    v = abi.program(key="t17/blur_smp", schema=abi.parse(BLUR_YAML, "blur/bindings.yaml"), wgsl=BLUR_WGSL).variant()
    image = np.zeros((4, 4, 4), np.float32)
    with pytest.raises(DispatchError, match="sampler 'smp' takes nothing") as err:
        v.run(n=(4, 4), inputs={"img": image, "smp": np.zeros(3)})  # run without a word before (review helper 181)
    assert (err.value.span.path, err.value.span.line) == ("blur/bindings.yaml", 3)


@pytest.mark.parametrize("call", ["textureSample(img, smp, c)", "textureSampleBias(img, smp, c, 0.0)", "vec4<f32>(dpdx(c.x))"])
def test_a_derivative_builtin_in_a_compute_body_is_refused_at_its_call(call):
    # naga said "Entry point main at Compute is invalid", naming no line (review helper 181).
    from engine_plugin.errors import LoweringError

    wgsl = BLUR_WGSL.replace("textureSampleLevel(img, smp, c + vec2<f32>(-h.x, -h.y), 0.0)", call)  # on line 8
    with pytest.raises(LoweringError, match=r"takes screen-space derivatives, which a compute shader does not have") as err:
        abi.lower(abi.parse(BLUR_YAML, "blur/bindings.yaml"), wgsl, wgsl_path="blur/kernel.wgsl")
    assert (err.value.span.path, err.value.span.line) == ("blur/kernel.wgsl", 8)


def test_a_texture_view_is_refused_saying_what_to_pass():
    # Review helper 205: a GPUTextureView (a mip chain's level) handed to a texture binding was
    # read as a numpy array ("takes an array of shape (h, w) ... not ()").
    import wgpu

    dev, usage = abi.device(), wgpu.TextureUsage
    texture = dev.create_texture(size=(8, 8, 1), format="rgba32float", mip_level_count=2, usage=usage.TEXTURE_BINDING | usage.COPY_DST, label="chain")
    level = texture.create_view(base_mip_level=1, mip_level_count=1)
    double = copy("float", "rgba32float", "2.0")
    with pytest.raises(DispatchError, match="a GPUTextureView is no texture 'src'.*the GPUTexture") as info:
        double.run(n=(4, 4), inputs={"src": level})
    assert info.value.span.path is not None and info.value.span.line == 2
    with pytest.raises(DispatchError, match="outputs\\['out'\\] is a GPUTexture or an earlier run's texture output, not GPUTextureView.*one level"):
        double.run(n=(4, 4), inputs={"src": texture}, outputs={"out": level})


F16_YAML = """\
bindings:
  - { name: img, kind: storage_texture, format: rgba16float, access: read }
  - { name: dst, kind: buffer, access: read_write, element: vec4<f32>, count: "n" }
workgroup: [8, 8]
"""
F16_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, textureLoad(img, gid.xy));
}
"""


def _f16_variant():
    return abi.program(key="t/f16_ranges", schema=abi.parse(F16_YAML, "f16/bindings.yaml"), wgsl=F16_WGSL).variant()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_float_texel_too_small_for_f16_is_refused_not_read_as_zero(dtype):
    # Review helper 214: a float32 1e-8 (below f16's smallest, 5.96e-8) reached the kernel of
    # an rgba16float binding as 0.0, where the same float64 value was refused.
    with pytest.raises(DispatchError, match=r"below float16's smallest .* it would become 0"):
        _f16_variant().run(n=(1, 1), inputs={"img": np.full((1, 1, 4), 1e-8, dtype)})


def test_a_float_texel_that_rounds_to_f16s_largest_is_taken_and_one_past_it_is_refused():
    # Review helper 214: 65519 rounds to 65504 (f16's largest), not to infinity; it was refused
    # as "beyond f16's range". 65520 does round to infinity.
    variant = _f16_variant()
    got = abi.read(variant.run(n=(1, 1), inputs={"img": np.full((1, 1, 4), 65519.0, np.float32)}).outputs["dst"])
    np.testing.assert_array_equal(got[0], np.float32(np.float16(65519.0)))
    with pytest.raises(DispatchError, match=r"infinity"):
        variant.run(n=(1, 1), inputs={"img": np.full((1, 1, 4), 65520.0, np.float32)})


def test_a_big_endian_float64_image_is_taken_as_a_native_one_is():
    # Review helper 214: a native float64 image was taken (as f32), a big-endian one refused
    # with "no texture format holds >f8 texels".
    image = np.arange(4 * 4, dtype=np.float64).reshape(4, 4) / 8
    double = copy("float", "rgba32float", "2.0")
    native = abi.read(double.run(n=(4, 4), inputs={"src": image}).outputs["out"])
    swapped = abi.read(double.run(n=(4, 4), inputs={"src": image.astype(">f8")}).outputs["out"])
    np.testing.assert_array_equal(swapped, native)
    np.testing.assert_array_equal(native[..., 0][:, 0::2], (image * 2)[:, 0::2])


# A texture, a storage texture and a buffer binding (the wrong-object tests hand each the other's).
MIXED_YAML = """\
bindings:
  - { name: src, kind: texture }
  - { name: out, kind: storage_texture, format: rgba32float, size: [nx, ny] }
  - { name: buf, kind: buffer, access: read, element: f32 }
workgroup: [8, 8]
"""
MIXED_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (zero_index(gid) >= zero_n()) { return; }
    textureStore(out, gid.xy, textureLoad(src, gid.xy, 0) + vec4<f32>(buf_get(0u)));
}
"""


def test_a_texture_handed_to_a_buffer_binding_is_refused_saying_where_it_binds():
    # Review helper 214: it said "dtype object is not numeric".
    v = abi.program(key="t/texture_to_buffer", schema=abi.parse(MIXED_YAML, "tb/bindings.yaml"), wgsl=MIXED_WGSL).variant()
    image, one = np.ones((2, 2, 4), np.float32), np.ones(1, np.float32)
    made = v.run(n=(2, 2), inputs={"src": image, "buf": one}).outputs["out"]
    np.testing.assert_array_equal(abi.read(made), 2.0)
    with pytest.raises(DispatchError, match=r"input 'buf' is a f32 buffer; a texture binds to a kind: texture or storage_texture binding") as info:
        v.run(n=(2, 2), inputs={"src": image, "buf": made})
    assert info.value.span is not None and info.value.span.line == 4


def test_an_object_numpy_cannot_read_is_refused_naming_its_type():
    # Review helper 235: a Run (not run.outputs[...]), a sampler, a Variant handed to a buffer
    # or texture binding said "dtype object is not numeric" (or "... not ()" for a texture).
    v = abi.program(key="t/object_inputs", schema=abi.parse(MIXED_YAML, "oi/bindings.yaml"), wgsl=MIXED_WGSL).variant()
    image, one = np.ones((2, 2, 4), np.float32), np.ones(1, np.float32)
    run = v.run(n=(2, 2), inputs={"src": image, "buf": one})
    with pytest.raises(DispatchError, match=r"input 'buf' takes one of a run's outputs \(run.outputs\[name\]\), not the Run") as info:
        v.run(n=(2, 2), inputs={"src": image, "buf": run})
    assert info.value.span is not None and info.value.span.line == 4
    sampler = abi.device().create_sampler()
    with pytest.raises(DispatchError, match=r"input 'buf' \(f32\): takes an array of numbers, not a GPUSampler object"):
        v.run(n=(2, 2), inputs={"src": image, "buf": sampler})
    with pytest.raises(DispatchError, match=r"input 'buf' \(f32\): takes an array of numbers, not a Variant object"):
        v.run(n=(2, 2), inputs={"src": image, "buf": v})
    with pytest.raises(DispatchError, match=r"texture 'src' \(2d\) takes an array of numbers, not a Variant object"):
        v.run(n=(2, 2), inputs={"src": v, "buf": one})
    np.testing.assert_array_equal(abi.read(v.run(n=(2, 2), inputs={"src": image, "buf": one}).outputs["out"]), 2.0)  # nothing poisoned
