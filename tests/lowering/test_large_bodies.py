"""Bodies with tens of thousands of declarations lower in time linear in their size: the
lowering runs on the engine's reload worker and in bakes, where a quadratic pass over a 1 MB
body held them for minutes (review helper 224)."""

from __future__ import annotations

import pytest

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
