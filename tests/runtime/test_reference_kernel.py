"""The reference ABI example end to end on the real GPU, for every element type and fold."""

import numpy as np
import pytest

from engine_plugin import abi

REF = "assets/samples/reference.computeShader"
TYPES = ["f32", "i32", "vec2<f32>", "vec3<f32>", "vec4<f32>"]
FOLDS = ["add", "min", "max", "mean", "set"]


@pytest.fixture(scope="module")
def reference(repo_root):
    yaml_path = f"{repo_root}/{REF}/bindings.yaml"
    wgsl_path = f"{repo_root}/{REF}/kernel.wgsl"
    schema = abi.parse(open(yaml_path).read(), yaml_path)
    return abi.program(key="samples/reference", schema=schema, wgsl=open(wgsl_path).read(), wgsl_path=wgsl_path)


def expected(src, weight, fold, body=lambda v: v):
    right = src[np.minimum(np.arange(len(src)) + 1, len(src) - 1)]
    w = weight.reshape(-1, *([1] * (src.ndim - 1))).astype(src.dtype)
    a = body(src) * w
    if fold == "add":
        return a + right
    if fold == "min":
        return np.minimum(a, right)
    if fold == "max":
        return np.maximum(a, right)
    if fold == "mean":
        return (a + right) // 2 if src.dtype.kind == "i" else (a + right) / 2
    return a


def inputs_for(t, n, rng):
    lanes = 1 if t in ("f32", "i32") else int(t[3])
    if t == "i32":
        src = rng.integers(0, 1000, size=n).astype(np.int32)
    else:
        src = rng.uniform(-10, 10, size=(n, lanes) if lanes > 1 else n).astype(np.float32)
    weight = rng.integers(1, 4, size=n).astype(np.float32)
    return src, weight


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("fold", FOLDS)
def test_reference_kernel_matches_numpy_for_every_type_and_fold(reference, t, fold):
    rng = np.random.default_rng(hash((t, fold)) % 2**32)
    n = 300
    src, weight = inputs_for(t, n, rng)
    variant = reference.variant(specialize={"T": t, "FOLD": fold})
    run = variant.run(n=n, inputs={"src": src, "cols": abi.table({"weight": weight})})
    got = abi.read(run.outputs["dst"])
    want = expected(src, weight, fold)
    assert got.shape == want.shape
    if t == "i32":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    hits = run.outputs["hits"]
    assert hits.count == n and hits.overflow is None
    rows = abi.read(hits)
    np.testing.assert_array_equal(rows[:, 0], np.arange(n, dtype=np.float32))
    assert np.all(rows[:, 1] == FOLDS.index(fold))


def test_source_splicing_changes_the_computation(reference):
    rng = np.random.default_rng(1)
    src, weight = inputs_for("f32", 100, rng)
    variant = reference.variant(specialize={"T": "f32", "FOLD": "set", "BODY": "(v * v + 1.0)"})
    got = abi.read(variant.run(n=100, inputs={"src": src, "cols": abi.table({"weight": weight})}).outputs["dst"])
    np.testing.assert_allclose(got, (src * src + 1.0) * weight, rtol=1e-6)


def test_a_body_value_without_brackets_is_the_whole_of_what_the_comment_says(reference):
    # Review helper 205: the sample's comment reads dst = FOLD(BODY(v) * weight, ...), and its
    # body spliced BODY bare into `BODY * weight`: BODY="v + 1.0" computed v + 1.0 * weight.
    # Spliced text is as written (the seed: "replace the identifier with text"); the sample
    # brackets it where precedence matters.
    rng = np.random.default_rng(3)
    src, weight = inputs_for("f32", 100, rng)
    variant = reference.variant(specialize={"T": "f32", "FOLD": "set", "BODY": "v + 1.0"})
    got = abi.read(variant.run(n=100, inputs={"src": src, "cols": abi.table({"weight": weight})}).outputs["dst"])
    np.testing.assert_allclose(got, (src + 1.0) * weight, rtol=1e-6)


def test_exact_kernel_gives_identical_bytes_on_repeated_runs(reference):
    rng = np.random.default_rng(2)
    src, weight = inputs_for("vec3<f32>", 5000, rng)
    variant = reference.variant(specialize={"T": "vec3<f32>", "FOLD": "mean"})
    table = abi.table({"weight": weight})
    first = abi.read(variant.run(n=5000, inputs={"src": src, "cols": table}).outputs["dst"]).tobytes()
    for _ in range(3):
        again = abi.read(variant.run(n=5000, inputs={"src": src, "cols": table}).outputs["dst"]).tobytes()
        assert again == first


def test_same_schema_and_source_is_the_same_program_with_its_variants(reference):
    again = abi.program(key="samples/reference", schema=reference.schema, wgsl=reference.wgsl, wgsl_path=reference.wgsl_path)
    assert again is reference
    v1 = reference.variant(specialize={"T": "f32", "FOLD": "add"})
    assert again.variant(specialize={"FOLD": "add", "T": "f32"}) is v1
    changed = abi.program(key="samples/reference", schema=reference.schema, wgsl=reference.wgsl + "\n// edit\n", wgsl_path=reference.wgsl_path)
    assert changed is not reference
    # The old program stays usable for whoever holds it.
    assert reference.variant(specialize={"T": "f32", "FOLD": "add"}) is v1


def test_unset_named_option_takes_its_first_option_as_the_seed_says(reference):
    assert reference.variant(specialize={"T": "f32"}) is reference.variant(specialize={"T": "f32", "FOLD": "add"})


def test_unknown_specialisation_values_list_the_options(reference):
    from engine_plugin.errors import SpecializationError

    with pytest.raises(SpecializationError, match="'f64' is not an option.*f32, i32"):
        reference.variant(specialize={"T": "f64", "FOLD": "add"})
    with pytest.raises(SpecializationError, match="unknown specialisation 'Q'"):
        reference.variant(specialize={"T": "f32", "FOLD": "add", "Q": "x"})
