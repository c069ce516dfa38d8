"""Atomic constraints and constraints in disjunctive normal form (Definition 1).

An atom names one variable: ``X = c`` (a URI, a string, a number, a date, or another literal compared as
a term), ``X op c`` with ``op`` in ``< <= > >=`` for numbers and dates, ``X contains "s"`` for strings.
A ``Constraint`` is a disjunction of conjunctions of atoms, kept sorted and de-duplicated so that two
constraints written differently but normalised alike compare equal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from qel import domains
from qel.domains import Domain
from qel.terms import KIND_DATE, KIND_NUMBER, KIND_STRING, Literal, Term

COMPARISONS: Final = ("<", "<=", ">", ">=")
OPERATORS: Final = ("=", *COMPARISONS, "contains")


@dataclass(frozen=True, slots=True)
class Atom:
    """``variable op value``; validated when built, so an Atom is always within the language."""

    variable: str
    op: str
    value: Term

    def __post_init__(self) -> None:
        if self.op not in OPERATORS:
            raise ValueError(f"unknown operator {self.op!r}")
        if self.op in COMPARISONS:
            if self.value.kind not in (KIND_NUMBER, KIND_DATE):
                raise ValueError(f"{self.op} compares numbers or dates, not {describe(self.value)}")
            _finite(self.value)
        elif self.op == "contains":
            if self.value.kind != KIND_STRING:
                raise ValueError(f"contains takes a string, not {describe(self.value)}")
        elif self.value.kind in (KIND_NUMBER, KIND_DATE):
            _finite(self.value)

    def domain(self) -> Domain:
        value = self.value
        if self.op == "=":
            return domains.point(value)
        if self.op == "contains":
            return domains.contains(value.value)  # type: ignore[arg-type]
        bound = _exact(value.value)  # type: ignore[arg-type]
        if self.op == "<":
            return domains.RangeDomain(value.kind, high=bound)
        if self.op == "<=":
            return domains.RangeDomain(value.kind, high=bound, high_inclusive=True)
        if self.op == ">":
            return domains.RangeDomain(value.kind, low=bound)
        return domains.RangeDomain(value.kind, low=bound, low_inclusive=True)

    def sort_key(self) -> tuple[str, int, str, str]:
        return (self.variable, OPERATORS.index(self.op), self.value.kind, repr(self.value))


def _finite(value: Term) -> None:
    number = value.value
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"{value.lexical!r} is not a finite number")  # type: ignore[union-attr]


def _exact(value: int | Fraction | float) -> int | Fraction:
    if isinstance(value, float):
        exact = Fraction(value)
        return exact.numerator if exact.denominator == 1 else exact
    return value


def describe(term: Term) -> str:
    if isinstance(term, Literal):
        if term.kind == KIND_STRING:
            return f"the string {term.lexical!r}"
        if term.kind == KIND_NUMBER:
            return f"the number {term.lexical}"
        if term.kind == KIND_DATE:
            return f"the date {term.lexical}"
        return f"the literal {term.lexical!r}^^<{term.datatype}>"
    return f"the URI <{term.value}>"


Conjunction = tuple[Atom, ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    """A DNF: ``disjuncts`` is a tuple of conjunctions. ``()`` is false; ``((),)`` is true."""

    disjuncts: tuple[Conjunction, ...]

    def __post_init__(self) -> None:
        normalised = _normalise(self.disjuncts)
        object.__setattr__(self, "disjuncts", normalised)

    @classmethod
    def of(cls, disjuncts: Iterable[Iterable[Atom]]) -> Constraint:
        return cls(tuple(tuple(conjunction) for conjunction in disjuncts))

    @property
    def is_true(self) -> bool:
        return self.disjuncts == ((),)

    def variables(self) -> frozenset[str]:
        return frozenset(atom.variable for conjunction in self.disjuncts for atom in conjunction)

    def atom_count(self) -> int:
        return sum(len(conjunction) for conjunction in self.disjuncts)


def _normalise(disjuncts: tuple[Conjunction, ...]) -> tuple[Conjunction, ...]:
    conjunctions = {tuple(sorted(set(conjunction), key=Atom.sort_key)) for conjunction in disjuncts}
    if () in conjunctions:
        return ((),)
    return tuple(sorted(conjunctions, key=lambda c: [atom.sort_key() for atom in c]))


TRUE: Final = Constraint(((),))
FALSE: Final = Constraint(())


def conjunction_domains(conjunction: Iterable[Atom]) -> dict[str, Domain] | None:
    """The domain of each constrained variable, or None if the conjunction is unsatisfiable."""
    result: dict[str, Domain] = {}
    for atom in conjunction:
        narrowed = domains.intersect(result.get(atom.variable, domains.ANY), atom.domain())
        if narrowed is None:
            return None
        result[atom.variable] = narrowed
    return result


def satisfiable(constraint: Constraint) -> bool:
    """Whether some assignment of terms to the variables makes the constraint true."""
    return any(conjunction_domains(conjunction) is not None for conjunction in constraint.disjuncts)


def conjoin(parts: Iterable[Constraint], *, max_disjuncts: int) -> Constraint:
    """The DNF of a conjunction of DNFs (distribution), refusing to grow past ``max_disjuncts``."""
    current: list[Conjunction] = [()]
    for part in parts:
        if len(current) * len(part.disjuncts) > max_disjuncts:
            raise OverflowError(
                f"the constraint has more than {max_disjuncts} disjuncts in DNF (max_disjuncts)"
            )
        current = [left + right for left in current for right in part.disjuncts]
    return Constraint(tuple(current))


def disjoin(parts: Iterable[Constraint], *, max_disjuncts: int) -> Constraint:
    disjuncts = tuple(conjunction for part in parts for conjunction in part.disjuncts)
    if len(disjuncts) > max_disjuncts:
        raise OverflowError(
            f"the constraint has more than {max_disjuncts} disjuncts in DNF (max_disjuncts)"
        )
    return Constraint(disjuncts)


def negate_atom(atom: Atom) -> Constraint:
    """``not atom`` inside the language, or ValueError when it has no equivalent there."""
    flipped = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
    if atom.op in flipped:
        return Constraint(((Atom(atom.variable, flipped[atom.op], atom.value),),))
    if atom.op == "=" and atom.value.kind in (KIND_NUMBER, KIND_DATE):
        return Constraint(
            (
                (Atom(atom.variable, "<", atom.value),),
                (Atom(atom.variable, ">", atom.value),),
            )
        )
    raise ValueError(f"the negation of {atom.op} on {describe(atom.value)} is not in the language")
