"""Bodies with tens of thousands of declarations lower in time linear in their size: the
lowering runs on the engine's reload worker and in bakes, where a quadratic pass over a 1 MB
body held them for minutes (review helper 224)."""

from __future__ import annotations

import time

import pytest

from engine_plugin.errors import SpecializationError
from engine_plugin.lowering import lower, parse
from engine_plugin.lowering.wgsl_text import module_constants, tokens


class _CountingTokens(list):
    """A token list that counts the tokens read from it, one by one or copied in a slice."""

    read = 0

    def __getitem__(self, index):
        got = super().__getitem__(index)
        self.read += len(got) if isinstance(index, slice) else 1
        return got

    def __iter__(self):
        self.read += len(self)
        return super().__iter__()


def _consts(n: int, end: str) -> str:
    return "".join(f"const a{i} = min(1, 2){end}\n" for i in range(n)) + "fn main() { let x = a0; }\n"


@pytest.mark.parametrize(("end", "shape"), [(";", "declarations"), ("", "declarations missing their ';'")])
def test_module_constants_reads_each_token_a_bounded_number_of_times(end, shape):
    # module_constants copied the rest of the token list for each declaration (toks[j + 1 :]):
    # 65,000 'const aN=1;' lines took 97 s to lower; a missing ';' made each initialiser read
    # to the end of the file.
    counts = {}
    for n in (500, 2000):
        toks = _CountingTokens(tokens(_consts(n, end)))
        found = module_constants(toks)
        assert len(found) == n, shape
        counts[n] = toks.read / len(toks)
    assert counts[2000] < 10 and counts[2000] < 1.5 * counts[500], (shape, counts)


def test_module_constants_keeps_what_each_initialiser_says():
    toks = list(tokens("const a = min(1, 2);\noverride b: u32 = a * (3 + 4);\nconst c = 1\nconst d = array(1, 2);\nvar<private> e: u32;\n"))
    found = {name: " ".join(t.text for t in init) for name, init in module_constants(toks).items()}
    assert found == {"a": "min ( 1 , 2 )", "b": "a * ( 3 + 4 )", "c": "1", "d": "array ( 1 , 2 )"}


# A source default is spliced at each use: the files are within their limits, the kernel is not.
SPLICED_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src)" }
specialize:
  - { name: BODY, kind: source, default: "DEFAULT" }
"""


def _spliced_body(uses: int) -> str:
    return (
        "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    let v = src_get(i);\n    var s = 0.0;\n"
        + "    s = s + (BODY);\n" * uses
        + "    dst_set(i, s);\n}\n"
    )


@pytest.mark.parametrize(
    ("default", "uses", "given"),
    [("v /*" + "x" * 100 * 1024 + "*/", 128, None), ("v", 1, "v /*" + "x" * 3 * 2**20 + "*/")],
    ids=["default-used-128x", "game-value-3MiB"],
)
def test_a_source_value_spliced_past_the_kernel_limit_is_refused_at_once_at_its_specialisation(default, uses, given):
    # Review helper 237: the size limits were checked on the files as written; a 100 KiB
    # default used 128 times made 12.5 MiB of WGSL and 17 s of lowering on the game thread.
    schema = parse(SPLICED_YAML.replace("DEFAULT", default), "k/bindings.yaml")
    value = given if given is not None else default
    t0 = time.monotonic()
    with pytest.raises(SpecializationError) as info:
        lower(schema, _spliced_body(uses), {"BODY": given} if given is not None else {}, wgsl_path="k/kernel.wgsl")
    assert time.monotonic() - t0 < 2  # seconds to tens of seconds before
    err = info.value
    assert (err.span.path, err.span.line, err.span.col) == ("k/bindings.yaml", 5, 13)  # at `BODY` in its entry
    size = len(_spliced_body(uses)) + uses * (len(value) - len("BODY"))
    where = f"at its {uses} uses" if uses > 1 else "at its use"
    assert err.message == (
        f"source specialisation BODY's value ({len(value)} characters) spliced {where} makes a kernel of {size} characters: "
        "at most 1048576 here (a kernel is KiB, not MiB)"
    )
    assert err.notes == ("k/kernel.wgsl:7: first used here",)


def test_a_large_source_value_spliced_within_the_kernel_limit_still_lowers():
    default = "v /*" + "x" * 100 * 1024 + "*/"
    lowered = lower(parse(SPLICED_YAML.replace("DEFAULT", default), "k/bindings.yaml"), _spliced_body(4), {}, wgsl_path="k/kernel.wgsl")
    assert lowered.source.count(default) == 4
