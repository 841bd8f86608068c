"""``when`` conditions on bindings: ``NAME=opt|opt NAME2=opt; NAME=opt``.

A condition is in disjunctive normal form: alternatives separated by ``;``, each a
conjunction of terms separated by spaces, each term ``NAME=option|option``. Conditions are
frozen so two variants that agree on the options a binding depends on agree on its presence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

__all__ = ["Condition", "ConditionSyntaxError", "parse_condition"]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_TERM_RE = re.compile(rf"^({_IDENT})=([^\s=;|]+(?:\|[^\s=;|]+)*)$")


class ConditionSyntaxError(ValueError):
    """A malformed condition; ``offset`` is the 0-based index in the text of the bad part."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True)
class Condition:
    """``alternatives``: tuple of conjunctions; a conjunction: tuple of (name, frozenset(options))."""

    text: str
    alternatives: tuple[tuple[tuple[str, frozenset[str]], ...], ...]

    def names(self) -> frozenset[str]:
        return frozenset(name for conj in self.alternatives for name, _ in conj)

    def holds(self, values: Mapping[str, str]) -> bool:
        """Whether the condition holds for a full assignment of specialisation values."""
        return any(all(values.get(name) in opts for name, opts in conj) for conj in self.alternatives)

    def may_hold_with(self, other: "Condition") -> bool:
        """Whether some assignment makes both conditions hold (checked alternative by alternative)."""
        for a in self.alternatives:
            for b in other.alternatives:
                if _conjunctions_compatible(a, b):
                    return True
        return False


def _conjunctions_compatible(a, b) -> bool:
    merged: dict[str, frozenset[str]] = {}
    for name, opts in (*a, *b):
        merged[name] = merged[name] & opts if name in merged else opts
        if not merged[name]:
            return False
    return True


# Bounds on what a schema may ask the overlap check to compare (pairs of alternatives of pairs
# of same-named bindings: quadratic twice), so a hostile bindings.yaml parses in milliseconds.
MAX_ALTERNATIVES = 64


def parse_condition(text: str) -> Condition:
    """Parse a ``when`` string.

    Raises:
        ConditionSyntaxError: with the 0-based offset of the offending part.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConditionSyntaxError("empty condition; expected e.g. 'T=f32' or 'MODE=a|b; MODE=c FOLD=add'", 0)
    alternatives = []
    pos = 0
    parts = text.split(";")
    if len(parts) > MAX_ALTERNATIVES:
        raise ConditionSyntaxError(f"{len(parts)} alternatives; a condition takes at most {MAX_ALTERNATIVES} (name options with '|' instead)", 0)
    for part in parts:
        conj: list[tuple[str, frozenset[str]]] = []
        seen: dict[str, int] = {}
        if not part.strip():
            raise ConditionSyntaxError("empty alternative between ';' separators", pos)
        for m in re.finditer(r"\S+", part):
            term = m.group(0)
            tm = _TERM_RE.match(term)
            if not tm:
                raise ConditionSyntaxError(f"expected NAME=option or NAME=option|option, found {term!r}", pos + m.start())
            name, opts = tm.group(1), frozenset(tm.group(2).split("|"))
            if name in seen:
                # Two terms on one name in a conjunction: both must hold, so intersect.
                idx = seen[name]
                conj[idx] = (name, conj[idx][1] & opts)
            else:
                seen[name] = len(conj)
                conj.append((name, opts))
        alternatives.append(tuple(sorted(conj, key=lambda t: t[0])))
        pos += len(part) + 1
    return Condition(text=text.strip(), alternatives=tuple(alternatives))
