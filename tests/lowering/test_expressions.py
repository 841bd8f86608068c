"""Tests for the count / capacity expression language (engine_plugin.lowering.expressions)."""

from __future__ import annotations

import dataclasses
import math
import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine_plugin.errors import ExpressionError, SchemaError
from engine_plugin.lowering.expressions import (
    MAX_DEPTH,
    MAX_LENGTH,
    MAX_MAGNITUDE,
    Expr,
    evaluate,
    parse_expression,
)

CAP = MAX_MAGNITUDE
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def raises_at(text, col, match=None, vars=None, lengths=None) -> ExpressionError:
    """Evaluate ``text`` and insist on an ExpressionError at column ``col``."""
    with pytest.raises(ExpressionError) as info:
        evaluate(text, vars if vars is not None else {}, lengths)
    err = info.value
    assert err.col == col, (text, err.col, col, err.message)
    assert err.span is not None and err.span.text == text
    if match is not None:
        assert match in err.message, (match, err.message)
    return err


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("42", 42),
        ("007", 7),
        ("1.5 * 2", 3),
        ("1.5", 1.5),
        (".5 + .5", 1),
        ("1. + 1", 2),
        ("2e3", 2000),
        ("2E+3", 2000),
        ("25e-1", 2.5),
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("10 - 4 - 3", 3),
        ("64 / 4 / 2", 8),
        ("2 * 3 - 4 / 2", 4),
        ("-2 * -3", 6),
        ("--3", 3),
        ("+3", 3),
        ("- - + 3", 3),
        ("2 - -1", 3),
        ("-2 + 5", 3),
        ("7 / 2", 3.5),
        ("ceil(7 / 2)", 4),
        ("floor(7 / 2)", 3),
        ("ceil(3)", 3),
        ("floor(2.9)", 2),
        ("ceil(-2.5) + 5", 3),
        ("floor(-2.5) + 5", 2),
        ("max(1, 5)", 5),
        ("max(1, 5, 3, 9, 2)", 9),
        ("min(4, 2, 8)", 2),
        ("max(min(3, 4), 2)", 3),
        ("((((5))))", 5),
        ("  1\t+\n2  ", 3),
        ("(1/3) * 3", 1),
        ("1/3 + 1/3 + 1/3", 1),
        ("0.1 + 0.2", 0.3),  # exact decimals: no 0.30000000000000004
        ("0 * 5 - 0", 0),
    ],
)
def test_values(text, expected):
    result = evaluate(text, {})
    assert result == expected
    assert type(result) is type(expected)


def test_variables_params_and_lengths():
    vars = {"n": 100, "k": 3, "scale": 0.5}
    lengths = {"src": 10, "dst": 4}
    assert evaluate("n", vars) == 100
    assert evaluate("ceil(n / 64) * 64", vars) == 128
    assert evaluate("n * k + len(src)", vars, lengths) == 310
    assert evaluate("max(len(src), len(dst), k)", vars, lengths) == 10
    assert evaluate("n * scale", vars) == 50
    assert type(evaluate("n * scale", vars)) is int
    assert evaluate("k * scale", vars) == 1.5
    assert evaluate("len(src)", {}, lengths) == 10


def test_ints_stay_exact_ints():
    big = 2**53 + 1  # not representable as a float
    assert evaluate("n + 0", {"n": big}) == big
    assert evaluate("n * 3 - 2", {"n": 2**61}) == 3 * 2**61 - 2
    assert type(evaluate("n * 3", {"n": 2**61})) is int
    # division is exact while both sides are exact, so ceil is right even past 2**53
    n = 2**62 + 1
    assert evaluate("ceil(n / 64)", {"n": n}) == -(-n // 64)
    assert evaluate("floor(n / 64)", {"n": n}) == n // 64
    assert evaluate("n / 3 * 3", {"n": n}) == n


def test_true_division_and_result_types():
    assert evaluate("8 / 2", {}) == 4 and type(evaluate("8 / 2", {})) is int
    assert evaluate("1 / 4", {}) == 0.25 and type(evaluate("1 / 4", {})) is float
    assert type(evaluate("ceil(1.5)", {})) is int
    assert type(evaluate("floor(x)", {"x": 2.5})) is int
    # a float variable that lands on an integer comes back as an int
    assert evaluate("x * 2", {"x": 1.5}) == 3 and type(evaluate("x * 2", {"x": 1.5})) is int


def test_numpy_scalars_are_numbers():
    np = pytest.importorskip("numpy")
    assert evaluate("n * 2", {"n": np.int64(21)}) == 42
    assert evaluate("n * 2", {"n": np.float32(1.25)}) == 2.5
    assert evaluate("len(a)", {}, {"a": np.uint32(7)}) == 7


def test_limits_are_inclusive():
    assert evaluate("n", {"n": CAP}) == CAP
    assert evaluate("n - 1 + 1", {"n": CAP}) == CAP
    raises_at("n + 1", 3, "too large", {"n": CAP})


# --------------------------------------------------------------------------- the Expr object


def test_expr_names_and_lengths():
    e = parse_expression("max(n, len(src), k * ceil(len(dst) / w)) - -1")
    assert isinstance(e, Expr)
    assert e.text == "max(n, len(src), k * ceil(len(dst) / w)) - -1"
    assert e.names == frozenset({"n", "k", "w"})
    assert e.lengths == frozenset({"src", "dst"})
    assert isinstance(e.names, frozenset) and isinstance(e.lengths, frozenset)
    assert parse_expression("3").names == frozenset()
    # a binding used in len() is not a free variable, even when it shares a name with one
    e2 = parse_expression("len(n) + 1")
    assert e2.names == frozenset() and e2.lengths == frozenset({"n"})


def test_expr_is_frozen_and_hashable():
    e = parse_expression("n * 2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.text = "n"  # type: ignore[misc]
    assert hash(e) == hash(parse_expression("n * 2"))
    assert {e: 1}[parse_expression("n * 2")] == 1
    assert e.evaluate({"n": 4}, {}) == 8
    assert e.evaluate({"n": 4}) == 8


def test_memoised_by_text():
    a = parse_expression("ceil(n / 64)")
    assert parse_expression("ceil(n / 64)") is a
    assert parse_expression("ceil(n/64)") is not a  # different text, different object
    assert parse_expression(4) is parse_expression("4")  # YAML's `count: 4`
    evaluate("ceil(n / 64)", {"n": 1})
    assert parse_expression("ceil(n / 64)") is a


def test_non_string_expression():
    with pytest.raises(ExpressionError):
        parse_expression(None)  # type: ignore[arg-type]
    with pytest.raises(ExpressionError):
        parse_expression(True)  # type: ignore[arg-type]
    with pytest.raises(ExpressionError):
        parse_expression(["n"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- errors


def test_error_class_and_caret():
    err = raises_at("n + * 2", 5, "found '*'", {"n": 1})
    assert isinstance(err, SchemaError) and isinstance(err, ValueError)
    rendered = str(err).splitlines()
    assert rendered[0] == ("<string>:1:5: expected a number, a name, a function call or '(' after '+' at column 3, found '*'")
    assert rendered[-2].strip() == "n + * 2"
    assert rendered[-1].index("^") - rendered[-2].index("n") == 4  # caret under column 5


@pytest.mark.parametrize(
    ("text", "col", "match"),
    [
        # empty / whitespace
        ("", 1, "empty expression"),
        ("   ", 1, "empty expression"),
        # unclosed / unmatched parentheses
        ("(1 + 2", 7, "expected ')' to close '(' at column 1, found end of expression"),
        ("2 * (n + (3)", 13, "expected ')' to close '(' at column 5, found end of expression"),
        ("(1 2)", 4, "expected ')' to close '(' at column 1, found number 2"),
        ("1 + 2)", 6, "unmatched ')'"),
        (")", 1, "found ')'"),
        ("()", 2, "after '(' at column 1, found ')'"),
        # missing operands / trailing junk
        ("1 +", 4, "after '+' at column 3, found end of expression"),
        ("1 2", 3, "expected an operator (+ - * /) or end of expression, found number 2"),
        ("n m", 3, "found name 'm'"),
        ("2 ** 3", 4, "after '*' at column 3, found '*'"),
        ("1,2", 2, "found ','"),
        ("*3", 1, "found '*'"),
        # characters outside the language
        ("1 @ 2", 3, "unexpected character '@'"),
        ("n % 2", 3, "unexpected character '%'"),
        ("n ** 2 ; x", 8, "unexpected character ';'"),  # characters are checked first
        ("'n'", 1, "unexpected character"),
        ("n\x00", 2, "unexpected character '\\x00'"),
        ("nü", 2, "unexpected character 'ü'"),
        # bad numbers
        ("1.2.3", 1, "bad number '1.2.3'"),
        ("3 + 2e", 5, "bad number '2e'"),
        ("12abc", 1, "bad number '12abc'"),
        ("1..2", 1, "bad number"),
        ("1e500", 1, "exponent is out of range"),
        ("1 + 99999999999999999999", 5, "number too large"),
        # functions and arity
        ("max(1)", 1, "max() takes at least 2 arguments, got 1"),
        ("min(1)", 1, "min() takes at least 2 arguments, got 1"),
        ("ceil(1, 2)", 1, "ceil() takes exactly 1 argument, got 2"),
        ("2 + floor(1, 2, 3)", 5, "floor() takes exactly 1 argument, got 3"),
        ("max()", 5, "found ')'"),
        ("max(1,)", 7, "after ',' at column 6, found ')'"),
        ("max(1 2)", 7, "expected ',' or ')' to close 'max(' at column 1, found number 2"),
        ("max", 4, "expected '(' after function 'max', found end of expression"),
        ("ceil + 1", 6, "expected '(' after function 'ceil'"),
        ("foo(1)", 1, "unknown function 'foo'"),
        ("1 + n(2)", 5, "unknown function 'n'"),
        # len of a non-identifier
        ("len(3)", 5, "len() takes the name of a binding, found number 3"),
        ("len()", 5, "len() takes the name of a binding, found ')'"),
        ("len(a + b)", 7, "expected ')' to close 'len(' at column 1, found '+'"),
        ("len((a))", 5, "found '('"),
        ("len(a, b)", 6, "found ','"),
        ("len a", 5, "expected '(' after function 'len'"),
    ],
)
def test_syntax_errors(text, col, match):
    raises_at(text, col, match, {"n": 1, "m": 2, "a": 1, "b": 1, "x": 1})


def test_syntax_errors_are_raised_by_parse_alone():
    with pytest.raises(ExpressionError) as info:
        parse_expression("max(1")
    assert info.value.col == 6
    expected = "expected ',' or ')' to close 'max(' at column 1, found end of expression"
    assert expected in info.value.message


@pytest.mark.parametrize(
    ("text", "vars", "lengths", "col", "match"),
    [
        ("n + k", {"n": 1}, {}, 5, "unknown name 'k' (known: n)"),
        ("zz", {}, {}, 1, "unknown name 'zz' (known: none)"),
        ("1 + len(dst)", {}, {"src": 3}, 9, "no binding named 'dst' has a length here (known: src"),
        ("len(src)", {}, {"src": -1}, 5, "must be a non-negative integer"),
        ("len(src)", {}, {"src": 2.5}, 5, "must be a non-negative integer"),
        ("n", {"n": "4"}, {}, 1, "'n' is not a number (got str)"),
        ("n", {"n": True}, {}, 1, "not a number (got bool)"),
        ("n", {"n": None}, {}, 1, "not a number"),
        ("1 + n", {"n": float("nan")}, {}, 5, "'n' is not finite (nan)"),
        ("1 + n", {"n": float("inf")}, {}, 5, "not finite"),
        ("n", {"n": 2**64}, {}, 1, "'n' too large"),
        ("len(a)", {}, {"a": 2**64}, 5, "too large"),
        # division by zero: the column of the '/'
        ("1 / 0", {}, {}, 3, "division by zero"),
        ("n / (k - k)", {"n": 1, "k": 2}, {}, 3, "division by zero"),
        ("4 + 1/x", {"x": 0.0}, {}, 6, "division by zero"),
        ("1 / len(a)", {}, {"a": 0}, 3, "division by zero"),
        # magnitudes: the column of the operator that overflowed
        ("n * n * n", {"n": 2**30}, {}, 7, "too large"),
        ("n * n * n", {"n": 2**40}, {}, 3, "too large"),
        ("n * n", {"n": 2**32}, {}, 3, "'*' too large: 18446744073709551616 exceeds the limit"),
        ("n + n", {"n": 2**63}, {}, 3, "too large"),
        ("1 / x", {"x": 1e-300}, {}, 3, "too large"),
        ("1 / 1e-400", {}, {}, 3, "too large"),
        # non-finite intermediate
        ("1 / x", {"x": 5e-324}, {}, 3, "not finite (inf)"),
        # negative final result: column 1, with the value
        ("1 - 5", {}, {}, 1, "the size is negative: -4"),
        ("-n", {"n": 2.5}, {}, 1, "the size is negative: -2.5"),
        ("floor(-0.5)", {}, {}, 1, "negative: -1"),
        ("n - 10", {"n": 3}, {}, 1, "negative: -7"),
    ],
)
def test_evaluation_errors(text, vars, lengths, col, match):
    raises_at(text, col, match, vars, lengths)


def test_negative_intermediate_is_fine():
    assert evaluate("(1 - 5) * -1", {}) == 4
    assert evaluate("max(-3, 2)", {}) == 2
    assert evaluate("-0.0 + 0", {}) == 0


def test_length_limit():
    ok = "1" + "+1" * ((MAX_LENGTH - 1) // 2)
    assert len(ok) <= MAX_LENGTH
    assert evaluate(ok, {}) == (MAX_LENGTH - 1) // 2 + 1
    assert evaluate(" " * (MAX_LENGTH - 1) + "1", {}) == 1
    too_long = " " * MAX_LENGTH + "1"
    err = raises_at(too_long, 1, f"{MAX_LENGTH + 1} characters long; the limit is {MAX_LENGTH}")
    assert "limit" in str(err)


def _col_of_paren(text, k):
    """The 1-based column of the k-th '(' in text."""
    return [i for i, c in enumerate(text) if c == "("][k - 1] + 1


def test_nesting_limit():
    ok = "(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH
    assert evaluate(ok, {}) == 1
    deep = "(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1)
    raises_at(deep, MAX_DEPTH + 1, f"deeper than {MAX_DEPTH}")
    calls = "ceil(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1)
    raises_at(calls, _col_of_paren(calls, MAX_DEPTH + 1), "deeper than")
    mixed = "max(1, (" * 40 + "1" + "))" * 40
    raises_at(mixed, _col_of_paren(mixed, MAX_DEPTH + 1), "deeper than")
    # an unclosed flood of parentheses is the nesting error, never a RecursionError
    raises_at("(" * MAX_LENGTH, MAX_DEPTH + 1, "deeper than")


def test_long_flat_and_unary_runs_do_not_recurse():
    assert evaluate("-" * 996 + "1" + "+1", {}) == 2  # an even run of minus signs
    assert evaluate("-" * 995 + "1 + 1", {}) == 0
    assert evaluate("1" + "*1" * 499, {}) == 1
    assert evaluate("1" + "/1" * 499, {}) == 1
    e = parse_expression("0" + "+n" * 499)
    assert hash(e) == hash(parse_expression("0" + "+n" * 499))
    assert e.evaluate({"n": 2}, {}) == 998


def test_huge_numbers_do_not_hang():
    start = time.perf_counter()
    nines = "9" * 400
    for text in [
        f"{nines} * {nines}",
        "99999999999999999999 * 99999999999999999999",
        "1e400 * 1e400",
        "1" + "/1e-400" * 100,
        "1e-400" + " * 1e-400" * 100,
        "1/(" + "+".join(["1e-400"] * 100) + ")",
        "1" + "/7" * 490,
        "0." + "0" * 990 + "1",
        "n" + " * n" * 200,
    ]:
        try:
            evaluate(text, {"n": 2**62})
        except ExpressionError:
            pass
    assert time.perf_counter() - start < 2.0


def test_literal_exponent_beyond_range_is_refused_without_building_it():
    start = time.perf_counter()
    raises_at("1e" + "9" * 900, 1, "exponent is out of range")
    raises_at("1e-" + "9" * 900, 1, "exponent is out of range")
    assert time.perf_counter() - start < 1.0


# --------------------------------------------------------------------------- property: trees

NAMES = ["n", "k", "w", "count_a", "_b2"]
BINDINGS = ["src", "dst", "cells"]


def _num():
    ints = st.integers(0, 1000).map(lambda v: ("num", v, str(v)))

    def decimal(mp):
        m, p, style = mp
        value = Fraction(m, 10**p)
        if style == 0:
            digits = str(m).rjust(p + 1, "0")
            text = digits[: len(digits) - p] + "." + digits[len(digits) - p :] if p else f"{m}."
        else:
            text = f"{m}e-{p}" if style == 1 else f"{m}E-{p}"
        return ("num", value.numerator if value.denominator == 1 else value, text)

    decimals = st.tuples(st.integers(0, 10_000), st.integers(0, 4), st.integers(0, 2)).map(decimal)
    return st.one_of(ints, decimals)


LEAVES = st.one_of(
    _num(),
    st.sampled_from(NAMES).map(lambda s: ("var", s)),
    st.sampled_from(BINDINGS).map(lambda s: ("len", s)),
)


def _one(child):
    return (child,)


def _extend(children):
    return st.one_of(
        st.tuples(st.just("bin"), st.sampled_from("+-*/"), children, children),
        st.tuples(st.just("neg"), children),
        st.tuples(st.just("pos"), children),
        st.tuples(
            st.just("call"),
            st.sampled_from(["max", "min"]),
            st.lists(children, min_size=2, max_size=4).map(tuple),
        ),
        st.tuples(st.just("call"), st.sampled_from(["ceil", "floor"]), children.map(_one)),
    )


TREES = st.recursive(LEAVES, _extend, max_leaves=16)

VAR_VALUES = st.one_of(
    st.integers(0, 2_000),
    st.integers(-50, 50),
    st.integers(2**30, 2**40),  # products of these overflow the cap now and then
    st.integers(-8 * 40, 8 * 40).map(lambda v: v / 8),  # exact dyadic floats, like f32 params
    st.sampled_from([0, 0.0, 1, 2**63]),
)
VARS = st.fixed_dictionaries({name: VAR_VALUES for name in NAMES})
LENGTHS = st.fixed_dictionaries({name: st.integers(0, 5_000) for name in BINDINGS})

PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


class _Renderer:
    """Render a tree to text with random spacing and extra parentheses.

    Needed parentheses are always written so the text parses back to the same tree; the
    renderer answers a *located* copy of the tree carrying the 1-based column of each
    operator and name, for the reference evaluator's error columns.
    """

    def __init__(self, rnd):
        self.rnd = rnd
        self.parts: list[str] = []
        self.pos = 0  # characters written so far

    def emit(self, s: str) -> int:
        col = self.pos + 1
        self.parts.append(s)
        self.pos += len(s)
        return col

    def space(self):
        r = self.rnd.random()
        if r < 0.5:
            return
        self.emit(self.rnd.choice([" ", "  ", "\t", " \n "]) if r > 0.9 else " ")

    def render(self, node, need_parens=False):
        extra = self.rnd.random() < 0.15
        if need_parens or extra:
            self.emit("(")
            self.space()
            located = self._render(node)
            self.space()
            self.emit(")")
            return located
        return self._render(node)

    def _render(self, node):
        kind = node[0]
        if kind == "num":
            self.emit(node[2])
            return node
        if kind == "var":
            return ("var", node[1], self.emit(node[1]))
        if kind == "len":
            self.emit("len")
            self.space()
            self.emit("(")
            self.space()
            col = self.emit(node[1])
            self.space()
            self.emit(")")
            return ("len", node[1], col)
        if kind in ("neg", "pos"):
            self.emit("-" if kind == "neg" else "+")
            self.space()
            child = node[1]
            located = self.render(child, need_parens=child[0] == "bin")
            return (kind, located)
        if kind == "bin":
            _, op, left, right = node
            p = PREC[op]
            left_l = self.render(left, need_parens=left[0] == "bin" and PREC[left[1]] < p)
            self.space()
            col = self.emit(op)
            self.space()
            right_l = self.render(right, need_parens=right[0] == "bin" and PREC[right[1]] <= p)
            return ("bin", op, left_l, right_l, col)
        if kind == "call":
            _, func, args = node
            self.emit(func)
            self.space()
            self.emit("(")
            located = []
            for i, arg in enumerate(args):
                if i:
                    self.space()
                    self.emit(",")
                self.space()
                located.append(self.render(arg))
            self.space()
            self.emit(")")
            return ("call", func, tuple(located))
        raise AssertionError(node)

    def text(self) -> str:
        return "".join(self.parts)


class RefError(Exception):
    def __init__(self, kind: str, col: int):
        super().__init__(kind, col)
        self.kind = kind
        self.col = col


def _ref_check(value, col):
    if isinstance(value, Fraction) and value.denominator == 1:
        value = value.numerator
    if isinstance(value, float) and not math.isfinite(value):
        raise RefError("nonfinite", col)
    if abs(value) > CAP:
        raise RefError("large", col)
    return value


def _ref_eval(node, vars, lengths):
    """The reference: exact ints and fractions, float once a float is involved."""
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "var":
        return _ref_check(vars[node[1]], node[2])
    if kind == "len":
        return lengths[node[1]]
    if kind == "neg":
        return -_ref_eval(node[1], vars, lengths)
    if kind == "pos":
        return _ref_eval(node[1], vars, lengths)
    if kind == "bin":
        _, op, left, right, col = node
        a = _ref_eval(left, vars, lengths)
        b = _ref_eval(right, vars, lengths)
        if op == "+":
            r = a + b
        elif op == "-":
            r = a - b
        elif op == "*":
            r = a * b
        else:
            if b == 0:
                raise RefError("div", col)
            r = a / b if isinstance(a, float) or isinstance(b, float) else Fraction(a) / Fraction(b)
        return _ref_check(r, col)
    if kind == "call":
        _, func, args = node
        values = [_ref_eval(a, vars, lengths) for a in args]
        if func == "max":
            return max(values)
        if func == "min":
            return min(values)
        return math.ceil(values[0]) if func == "ceil" else math.floor(values[0])
    raise AssertionError(node)


def _reference(located, vars, lengths):
    value = _ref_check(_ref_eval(located, vars, lengths), 1)
    if value < 0:
        raise RefError("negative", 1)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Fraction):
        return float(value)
    return value


def _kind_of(err: ExpressionError) -> str:
    m = err.message
    for needle, kind in [
        ("division by zero", "div"),
        ("too large", "large"),
        ("not finite", "nonfinite"),
        ("negative", "negative"),
    ]:
        if needle in m:
            return kind
    return "other: " + m


def _tree_names(node, names, lengths):
    kind = node[0]
    if kind == "var":
        names.add(node[1])
    elif kind == "len":
        lengths.add(node[1])
    elif kind in ("neg", "pos"):
        _tree_names(node[1], names, lengths)
    elif kind == "bin":
        _tree_names(node[2], names, lengths)
        _tree_names(node[3], names, lengths)
    elif kind == "call":
        for a in node[2]:
            _tree_names(a, names, lengths)


@FAST
@given(tree=TREES, vars=VARS, lengths=LENGTHS, rnd=st.randoms(use_true_random=False))
def test_property_matches_reference_evaluation(tree, vars, lengths, rnd):
    renderer = _Renderer(rnd)
    located = renderer.render(tree)
    text = renderer.text()
    assume(len(text) <= MAX_LENGTH)

    expr = parse_expression(text)
    names: set[str] = set()
    lens: set[str] = set()
    _tree_names(tree, names, lens)
    assert expr.names == names
    assert expr.lengths == lens

    try:
        expected = _reference(located, vars, lengths)
    except RefError as ref:
        with pytest.raises(ExpressionError) as info:
            evaluate(text, vars, lengths)
        assert _kind_of(info.value) == ref.kind, (text, info.value.message)
        assert info.value.col == ref.col, (text, info.value.message)
        return
    got = evaluate(text, vars, lengths)
    assert type(got) is type(expected), (text, got, expected)
    if isinstance(expected, float):
        assert math.isclose(got, expected, rel_tol=1e-12, abs_tol=1e-300), (text, got, expected)
    else:
        assert got == expected, (text, got, expected)
    assert got >= 0


INT_LEAVES = st.one_of(
    st.integers(0, 1000).map(lambda v: ("num", v, str(v))),
    st.sampled_from(NAMES).map(lambda s: ("var", s)),
    st.sampled_from(BINDINGS).map(lambda s: ("len", s)),
)


def _int_extend(children):
    return st.one_of(
        st.tuples(st.just("bin"), st.sampled_from("+-*"), children, children),
        st.tuples(st.just("neg"), children),
        st.tuples(
            st.just("call"),
            st.sampled_from(["max", "min"]),
            st.lists(children, min_size=2, max_size=3).map(tuple),
        ),
    )


@FAST
@given(
    tree=st.recursive(INT_LEAVES, _int_extend, max_leaves=12),
    vars=st.fixed_dictionaries({name: st.integers(-100, 1000) for name in NAMES}),
    lengths=LENGTHS,
    rnd=st.randoms(use_true_random=False),
)
def test_property_agrees_with_python_on_integer_expressions(tree, vars, lengths, rnd):
    """Precedence and associativity checked against Python's own parser (test-only eval)."""
    renderer = _Renderer(rnd)
    located = renderer.render(tree)
    text = renderer.text()
    env = {"max": max, "min": min, "len": len, "__builtins__": {}}
    env.update(vars)
    env.update({b: [0] * size for b, size in lengths.items()})
    # test-only eval of text generated from our own grammar (the module never evals)
    python = eval(text.replace("\n", " "), env)  # noqa: S307
    try:
        _reference(located, vars, lengths)
    except RefError as ref:  # past the magnitude cap on the way, or a negative size
        with pytest.raises(ExpressionError) as info:
            evaluate(text, vars, lengths)
        assert _kind_of(info.value) == ref.kind
        if ref.kind == "negative":
            assert python < 0
        return
    result = evaluate(text, vars, lengths)
    assert result == python and type(result) is int


# --------------------------------------------------------------------------- property: fuzz

TOKENS = st.sampled_from(
    [
        "n",
        "k",
        "len",
        "max",
        "min",
        "ceil",
        "floor",
        "src",
        "(",
        ")",
        ",",
        "+",
        "-",
        "*",
        "/",
        "0",
        "1",
        "7",
        "2.5",
        ".5",
        "1e3",
        "1e",
        "9" * 25,
        " ",
        "x",
        "@",
        "e",
        ".",
        "1.2.3",
    ]
)


def _only_expression_errors(text):
    try:
        result = evaluate(text, {"n": 5, "k": 0, "x": 0.5}, {"src": 3})
    except ExpressionError as err:
        assert err.span is not None and err.span.text == text
        assert isinstance(err.col, int) and 1 <= err.col <= len(text) + 1
        assert err.message
        str(err)  # renders
        return
    assert type(result) in (int, float)
    assert result >= 0


@FAST
@given(st.text(max_size=60))
def test_property_arbitrary_text_only_raises_expression_error(text):
    _only_expression_errors(text)


@FAST
@given(st.lists(TOKENS, max_size=40).map("".join))
def test_property_token_soup_only_raises_expression_error(text):
    _only_expression_errors(text)


@settings(max_examples=30, deadline=None)
@given(st.text(alphabet="()+-*/,1n ", min_size=900, max_size=1100))
def test_property_long_inputs_only_raise_expression_error(text):
    _only_expression_errors(text)


def test_with_constants_replaces_free_names_only():
    from engine_plugin.lowering.expressions import with_constants

    assert with_constants("ceil(n / WG)", {"WG": 64}) == "ceil(n / 64)"
    assert with_constants("max(WG, len(WG2)) + WG*2", {"WG": 8, "WG2": 3}) == "max(8, len(WG2)) + 8*2"
    assert with_constants("n", {}) == "n"
    assert evaluate(with_constants("ceil(n / WG)", {"WG": 256}), {"n": 1000}) == 4


_MULTILINE_COUNTS = {
    # the value of `count:` in each YAML style, with `m` (unknown) on the second line
    "literal": "    count: |-\n      n + (2 * m)\n",
    "folded": "    count: >-\n      n +\n      (2 * m)\n",
    "plain": "    count: n +\n      (2 * m)\n",
    "double-quoted": '    count: "n +\n      (2 * m)"\n',
    "single-quoted": "    count: 'n +\n      (2 * m)'\n",
}


@pytest.mark.parametrize("style", sorted(_MULTILINE_COUNTS))
def test_an_unknown_name_in_a_multi_line_count_is_shown_where_it_stands(style):
    # Review helper 186: a linear offset from the scalar's start put the caret past the end
    # of its first line (7:21 on a 13-character line) for every multi-line style.
    from engine_plugin.errors import ExpressionError
    from engine_plugin.lowering import parse

    text = (
        "bindings:\n"
        "  - { name: src, kind: buffer, access: read, element: f32 }\n"
        "  - name: dst\n"
        "    kind: buffer\n"
        "    access: read_write\n"
        "    element: f32\n" + _MULTILINE_COUNTS[style]
    )
    with pytest.raises(ExpressionError) as info:
        parse(text, "a/bindings.yaml")
    span = info.value.span
    lines = text.split("\n")
    assert lines[span.line - 1][span.col - 1] == "m", (style, span.line, span.col, str(info.value))
    assert "'m'" in info.value.message


def test_an_unknown_name_is_shown_at_its_whole_word_use():
    # `n` is known, `e` is not: the caret goes to `e` itself, not to the e of `len`.
    from engine_plugin.errors import ExpressionError
    from engine_plugin.lowering import parse

    text = (
        "bindings:\n"
        "  - { name: src, kind: buffer, access: read, element: f32 }\n"
        '  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src) + e" }\n'
    )
    with pytest.raises(ExpressionError) as info:
        parse(text, "a/bindings.yaml")
    span = info.value.span
    assert text.split("\n")[span.line - 1][span.col - 1 :].startswith('e" }'), str(info.value)


_HEAD = "bindings:\n  - { name: src, kind: buffer, access: read, element: f32 }\n  - name: dst\n    kind: buffer\n    access: read_write\n    element: f32\n"


@pytest.mark.parametrize(
    "tail",
    [
        "    count: n +\n    clear: false\n",
        "    count: n *\n  - { name: z, kind: buffer, access: read, element: f32 }\n",
        "    count: |-\n      n +\n# the end\n",
        "    count: n +\n",
    ],
)
def test_an_expression_ending_too_early_is_shown_just_after_it(tail):
    # Review helper 187: an offset at the value's end was looked for in the text after the
    # scalar (the next key, the next binding's '-', a comment).
    from engine_plugin.errors import ExpressionError
    from engine_plugin.lowering import parse

    text = _HEAD + tail
    with pytest.raises(ExpressionError) as info:
        parse(text, "a/bindings.yaml")
    span = info.value.span
    line = text.split("\n")[span.line - 1]
    assert line.rstrip().endswith(("+", "*")) and span.col == len(line.rstrip()) + 1, (tail, span.line, span.col, str(info.value))


@pytest.mark.parametrize("value", ["!!str n + m", '!!str "n + m"', "&c n + m", "&c !!str n + m"])
def test_a_tagged_or_anchored_count_is_shown_at_the_name(value):
    from engine_plugin.errors import ExpressionError
    from engine_plugin.lowering import parse

    text = _HEAD + f"    count: {value}\n"
    with pytest.raises(ExpressionError) as info:
        parse(text, "a/bindings.yaml")
    span = info.value.span
    assert text.split("\n")[span.line - 1][span.col - 1] == "m", (value, span.col, str(info.value))
