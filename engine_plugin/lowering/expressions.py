"""Count / capacity expressions: the small language that sizes host-allocated outputs.

Grammar (whitespace is free between tokens)::

    expression := term (('+' | '-') term)*
    term       := unary (('*' | '/') unary)*
    unary      := ('+' | '-')* primary
    primary    := NUMBER | NAME | '(' expression ')'
                | 'len' '(' NAME ')'
                | ('max' | 'min') '(' expression (',' expression)+ ')'
                | ('ceil' | 'floor') '(' expression ')'
    NUMBER     := digits ['.' digits] [('e'|'E') ['+'|'-'] digits]   (also '.5' and '1.')

Parsed by a hand-written tokenizer and recursive-descent parser (never ``eval``, never the
``ast`` module) into a frozen :class:`Expr`, memoised by text.

Arithmetic is exact wherever it can be: ``+ - *`` on integers stay Python ints, ``/`` is true
division carried out on :class:`fractions.Fraction` while both sides are exact (so
``ceil(n / 64)`` is right for every ``n``), and decimal literals are exact too. A float
variable (an ``f32`` param) makes the arithmetic it touches float. ``ceil`` and ``floor``
answer ints; the final result is an ``int`` when it is integral, else a ``float``.

Every failure is an :class:`~engine_plugin.errors.ExpressionError` whose span carries the
1-based column of the offending token in the expression text (line 1, no path: the caller
that knows the YAML file re-anchors it), so ``str(error)`` shows a caret under it.
Magnitudes are capped at ``2**63`` at every step, text at 1,000 characters and nesting at 64
levels, so hostile input can neither hang nor recurse without bound.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Mapping, Union

from ..errors import ExpressionError, Span

__all__ = [
    "FUNCTIONS",
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MAX_MAGNITUDE",
    "Expr",
    "evaluate",
    "parse_expression",
    "with_constants",
]

MAX_LENGTH = 1000
"""Longest expression text accepted, in characters."""

MAX_DEPTH = 64
"""Deepest nesting of parentheses (grouping or call) accepted."""

MAX_MAGNITUDE = 2**63
"""No literal, variable, length, intermediate or final value may exceed this in magnitude."""

FUNCTIONS = ("ceil", "floor", "len", "max", "min")
"""The function names; they are reserved and cannot be used as variable names."""

_MAX_EXPONENT = 400  # |e| of a literal's exponent; beyond it the literal is refused
_MAX_DENOMINATOR_BITS = 8192  # an exact fraction finer than this continues as a float
# (every literal fits well within it: at most 1,000 digits and an exponent of 400)

Value = Union[int, Fraction, float]

_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = frozenset("0123456789")
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_PUNCT = frozenset("+-*/(),")


# --------------------------------------------------------------------------- errors


def _error(message: str, text: str | None, col: int) -> ExpressionError:
    return ExpressionError(message, Span(path=None, line=1, col=col, text=text))


def _fmt(value: Value) -> str:
    """A value for a message: ints exactly (or roughly when huge), others as floats."""
    if isinstance(value, int):
        if abs(value) < 10**30:
            return str(value)
        return f"{'-' if value < 0 else ''}about 2**{abs(value).bit_length() - 1}"
    if isinstance(value, Fraction):
        try:
            return repr(float(value))
        except OverflowError:
            return "more than 1e308" if value > 0 else "less than -1e308"
        except ZeroDivisionError:  # pragma: no cover - a Fraction never has a zero denominator
            return str(value)
    return repr(value)


def _check(value: Value, text: str, col: int, what: str = "value") -> Value:
    """Normalise one value (integral fractions become ints) and enforce finiteness and the cap."""
    if isinstance(value, Fraction):
        if value.denominator == 1:
            value = value.numerator
        elif value.denominator.bit_length() > _MAX_DENOMINATOR_BITS:
            value = float(value) if abs(value) <= MAX_MAGNITUDE else value
    if isinstance(value, float) and not math.isfinite(value):
        raise _error(f"{what} is not finite ({value!r})", text, col)
    if abs(value) > MAX_MAGNITUDE:  # type: ignore[operator]  # Value is int | Fraction | float
        raise _error(f"{what} too large: {_fmt(value)} exceeds the limit of 2**63", text, col)
    return value


# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "num", "name", one of "+-*/(),", or "end"
    text: str
    col: int
    value: Value | None = None


def _describe(tok: _Token) -> str:
    if tok.kind == "end":
        return "end of expression"
    if tok.kind == "num":
        return f"number {tok.text}"
    if tok.kind == "name":
        return f"name '{tok.text}'"
    return f"'{tok.text}'"


def _number_value(s: str, text: str, col: int) -> Value:
    if all(c in _DIGITS for c in s):
        value: Value = int(s)  # at most MAX_LENGTH digits: well under int()'s own limit
    else:
        _, _, exponent = s.lower().partition("e")
        if exponent and abs(int(exponent)) > _MAX_EXPONENT:
            raise _error(
                f"bad number '{s}': the exponent is out of range (at most {_MAX_EXPONENT} either way)",
                text,
                col,
            )
        value = Fraction(s)
    return _check(value, text, col, what="number")


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        col = i + 1
        if c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            m = _NUMBER.match(text, i)
            assert m is not None
            j = m.end()
            if j < n and (text[j].isalnum() or text[j] in "_."):
                k = j
                while k < n and (text[k].isalnum() or text[k] in "_."):
                    k += 1
                raise _error(f"bad number '{text[i:k]}'", text, col)
            s = m.group()
            tokens.append(_Token("num", s, col, _number_value(s, text, col)))
            i = j
        elif c in _NAME_START:
            m = _NAME.match(text, i)
            assert m is not None
            j = m.end()
            if j < n and text[j].isalnum():  # a non-ASCII letter or digit glued on
                raise _error(
                    f"unexpected character {text[j]!r} in name '{text[i:j]}' (names are ASCII letters, digits and '_')",
                    text,
                    j + 1,
                )
            tokens.append(_Token("name", m.group(), col))
            i = j
        elif c in _PUNCT:
            tokens.append(_Token(c, c, col))
            i += 1
        else:
            raise _error(
                f"unexpected character {c!r}: expected a number, a name, an operator (+ - * /), '(', ')' or ','",
                text,
                col,
            )
    tokens.append(_Token("end", "", n + 1))
    return tokens


# --------------------------------------------------------------------------- tree


class _Env:
    __slots__ = ("text", "vars", "lengths")

    def __init__(self, text: str, vars: Mapping[str, object], lengths: Mapping[str, object]):
        self.text = text
        self.vars = vars
        self.lengths = lengths


def _known(mapping: Mapping[str, object]) -> str:
    keys = sorted(k for k in mapping if isinstance(k, str))
    if not keys:
        return "none"
    shown = ", ".join(keys[:20])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > 20 else "")


def _as_number(raw: object, env: _Env, col: int, what: str) -> Value:
    if isinstance(raw, bool) or not isinstance(raw, numbers.Real):
        raise _error(f"{what} is not a number (got {type(raw).__name__})", env.text, col)
    if isinstance(raw, numbers.Integral):
        value: Value = int(raw)
    elif isinstance(raw, Fraction):
        value = raw
    else:
        value = float(raw)
    return _check(value, env.text, col, what=what)


@dataclass(frozen=True, slots=True)
class _Num:
    value: Value
    col: int

    def compute(self, env: _Env) -> Value:
        return self.value


@dataclass(frozen=True, slots=True)
class _Name:
    name: str
    col: int

    def compute(self, env: _Env) -> Value:
        try:
            raw = env.vars[self.name]
        except KeyError:
            raise _error(f"unknown name '{self.name}' (known: {_known(env.vars)})", env.text, self.col) from None
        return _as_number(raw, env, self.col, f"'{self.name}'")


@dataclass(frozen=True, slots=True)
class _Len:
    binding: str
    col: int  # of the binding name

    def compute(self, env: _Env) -> Value:
        try:
            raw = env.lengths[self.binding]
        except KeyError:
            raise _error(
                f"len({self.binding}): no binding named '{self.binding}' has a length here (known: {_known(env.lengths)})",
                env.text,
                self.col,
            ) from None
        what = f"len({self.binding})"
        if isinstance(raw, bool) or not isinstance(raw, numbers.Integral) or raw < 0:
            raise _error(f"{what} must be a non-negative integer, got {raw!r}", env.text, self.col)
        return _check(int(raw), env.text, self.col, what=what)


@dataclass(frozen=True, slots=True)
class _Neg:
    operand: object
    col: int  # of the first sign

    def compute(self, env: _Env) -> Value:
        return -self.operand.compute(env)  # type: ignore[attr-defined, operator]


@dataclass(frozen=True, slots=True)
class _Call:
    func: str  # max, min, ceil or floor
    args: tuple
    col: int  # of the function name

    def compute(self, env: _Env) -> Value:
        values = [a.compute(env) for a in self.args]
        if self.func == "max":
            return max(values)
        if self.func == "min":
            return min(values)
        (x,) = values
        result = math.ceil(x) if self.func == "ceil" else math.floor(x)
        return _check(result, env.text, self.col)


@dataclass(frozen=True, slots=True)
class _Chain:
    """A left-associative run of one precedence level: first op x op y ... (flat, not nested)."""

    first: object
    rest: tuple  # of (op, col, node)

    def compute(self, env: _Env) -> Value:
        acc: Value = self.first.compute(env)  # type: ignore[attr-defined]
        for op, col, node in self.rest:
            rhs: Value = node.compute(env)
            if op == "/" and rhs == 0:
                raise _error(f"division by zero: the divisor after '/' at column {col} is 0", env.text, col)
            try:
                if op == "+":
                    result = acc + rhs
                elif op == "-":
                    result = acc - rhs
                elif op == "*":
                    result = acc * rhs
                else:
                    if isinstance(acc, float) or isinstance(rhs, float):
                        result = acc / rhs
                    else:
                        result = Fraction(acc) / rhs
            except (OverflowError, ZeroDivisionError, ValueError) as exc:
                raise _error(f"cannot compute '{op}': {exc}", env.text, col) from None
            acc = _check(result, env.text, col, what=f"result of '{op}'")
        return acc


# --------------------------------------------------------------------------- parser


class _Parser:
    def __init__(self, text: str, tokens: list[_Token]):
        self.text = text
        self.tokens = tokens
        self.i = 0
        self.depth = 0
        self.names: set[str] = set()
        self.lengths: set[str] = set()

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        tok = self.tokens[self.i]
        if tok.kind != "end":
            self.i += 1
        return tok

    def fail(self, message: str, col: int) -> ExpressionError:
        return _error(message, self.text, col)

    def parse(self):
        if self.peek().kind == "end":
            raise self.fail("empty expression: expected a number, a name, a function call or '('", 1)
        node = self.expression()
        tok = self.peek()
        if tok.kind == ")":
            raise self.fail("unmatched ')': there is no '(' open here", tok.col)
        if tok.kind != "end":
            raise self.fail(
                f"expected an operator (+ - * /) or end of expression, found {_describe(tok)}",
                tok.col,
            )
        return node

    def expression(self):
        return self._chain(self.term, ("+", "-"))

    def term(self):
        return self._chain(self.unary, ("*", "/"))

    def _chain(self, operand, ops: tuple[str, ...]):
        first = operand()
        rest = []
        while self.peek().kind in ops:
            op = self.take()
            rest.append((op.kind, op.col, operand()))
        return _Chain(first, tuple(rest)) if rest else first

    def unary(self):
        negative = False
        col = None
        while self.peek().kind in ("+", "-"):
            tok = self.take()
            col = col or tok.col
            if tok.kind == "-":
                negative = not negative
        node = self.primary()
        return _Neg(node, col) if negative else node

    def open(self, tok: _Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"expression nests deeper than {MAX_DEPTH} levels of parentheses", tok.col)

    def close(self, label: str, col: int, alternatives: str = "')'") -> None:
        tok = self.peek()
        if tok.kind != ")":
            raise self.fail(
                f"expected {alternatives} to close {label} at column {col}, found {_describe(tok)}",
                tok.col,
            )
        self.take()
        self.depth -= 1

    def primary(self):
        before = self.tokens[self.i - 1] if self.i > 0 else None
        tok = self.take()
        if tok.kind == "num":
            return _Num(tok.value, tok.col)  # type: ignore[arg-type]
        if tok.kind == "name":
            if tok.text in FUNCTIONS:
                return self.call(tok)
            if self.peek().kind == "(":
                raise self.fail(f"unknown function '{tok.text}' (functions: {', '.join(FUNCTIONS)})", tok.col)
            self.names.add(tok.text)
            return _Name(tok.text, tok.col)
        if tok.kind == "(":
            self.open(tok)
            node = self.expression()
            self.close("'('", tok.col)
            return node
        where = f" after {_describe(before)} at column {before.col}" if before is not None else ""
        raise self.fail(
            f"expected a number, a name, a function call or '('{where}, found {_describe(tok)}",
            tok.col,
        )

    def call(self, name: _Token):
        func = name.text
        lp = self.peek()
        if lp.kind != "(":
            raise self.fail(f"expected '(' after function '{func}', found {_describe(lp)}", lp.col)
        self.take()
        self.open(lp)
        label = f"'{func}('"
        if func == "len":
            arg = self.take()
            if arg.kind != "name":
                raise self.fail(f"len() takes the name of a binding, found {_describe(arg)}", arg.col)
            self.close(label, name.col)
            self.lengths.add(arg.text)
            return _Len(arg.text, arg.col)
        args = [self.expression()]
        while self.peek().kind == ",":
            self.take()
            args.append(self.expression())
        self.close(label, name.col, alternatives="',' or ')'")
        if func in ("max", "min"):
            if len(args) < 2:
                raise self.fail(f"{func}() takes at least 2 arguments, got {len(args)}", name.col)
        elif len(args) != 1:
            raise self.fail(f"{func}() takes exactly 1 argument, got {len(args)}", name.col)
        return _Call(func, tuple(args), name.col)


# --------------------------------------------------------------------------- public


@dataclass(frozen=True)
class Expr:
    """A parsed count / capacity expression. Equal (and hashed) by its text."""

    text: str
    root: object = field(compare=False, repr=False)
    names: frozenset[str] = field(compare=False)
    """Free variable names (not function names, not the arguments of ``len``)."""
    lengths: frozenset[str] = field(compare=False)
    """Binding names used inside ``len(...)``."""

    def evaluate(
        self,
        vars: Mapping[str, float | int] | None = None,
        lengths: Mapping[str, int] | None = None,
    ) -> int | float:
        """The expression's value: an int when integral, else a float; never negative."""
        env = _Env(self.text, vars if vars is not None else {}, lengths if lengths is not None else {})
        value = self.root.compute(env)  # type: ignore[attr-defined]
        value = _check(value, self.text, 1, what="size")
        if value < 0:
            raise _error(f"the size is negative: {_fmt(value)}", self.text, 1)
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value) if value.is_integer() else value
        return float(value)  # a non-integral Fraction


@lru_cache(maxsize=4096)
def _parse(text: str) -> Expr:
    if len(text) > MAX_LENGTH:
        raise _error(f"expression is {len(text)} characters long; the limit is {MAX_LENGTH}", text, 1)
    parser = _Parser(text, _tokenize(text))
    root = parser.parse()
    return Expr(text, root, frozenset(parser.names), frozenset(parser.lengths))


def parse_expression(text: str) -> Expr:
    """Parse ``text`` (memoised: the same text answers the same :class:`Expr` object).

    A plain int (as YAML gives for ``count: 4``) is taken as its decimal text.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise ExpressionError(f"an expression must be a string, got {type(text).__name__}")
    return _parse(text)


def evaluate(
    text: str,
    vars: Mapping[str, float | int] | None = None,
    lengths: Mapping[str, int] | None = None,
) -> int | float:
    """Parse (memoised) and evaluate ``text`` against ``vars`` and binding ``lengths``."""
    return parse_expression(text).evaluate(vars, lengths)


def with_constants(text: str, constants: Mapping[str, int]) -> str:
    """``text`` with each free name in ``constants`` replaced by its value (a variant's
    ``kind: workgroup`` specialisations, fixed when it is lowered): every evaluator of a
    lowered count (the run, the engine's plan, a CPU fallback's cap) then sees plain numbers.
    Function names and ``len(...)`` arguments are left alone; the text is otherwise kept."""
    parse_expression(text)  # a bad expression fails here, on its own text
    if not constants:
        return text
    tokens = _tokenize(text)
    cuts: list[tuple[int, int, str]] = []
    for i, tok in enumerate(tokens):
        if tok.kind != "name" or tok.text not in constants or tokens[i + 1].kind == "(":
            continue
        if i >= 2 and tokens[i - 1].kind == "(" and tokens[i - 2].kind == "name" and tokens[i - 2].text == "len":
            continue  # len(NAME): a binding's length
        cuts.append((tok.col - 1, tok.col - 1 + len(tok.text), str(int(constants[tok.text]))))
    for start, end, value in reversed(cuts):
        text = text[:start] + value + text[end:]
    return text
