"""Compiled subscriptions: the form matching, covering and indexing work on.

A subscription (Definition 2) is a set of triple patterns on one subject plus a DNF constraint. Since
every atom names one variable and object variables are distinct, the subscription is equivalent to a
disjunction of *filters*: one per satisfiable conjunction of the DNF, each a subject domain and, per
triple pattern, the predicate and the domain of its object. A publication matches a filter when its
subject is in the subject domain and, for every pattern, some object of that predicate is in the
pattern's domain. Variable names are gone, so two subscriptions that differ only in naming or in how
the constraint was written compile to the same filters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qel import domains
from qel.domains import Domain
from qel.terms import URI, Literal, Term

if TYPE_CHECKING:
    from qel.model import Publication


@dataclass(frozen=True, slots=True)
class Filter:
    """One conjunctive alternative of a subscription: ``subject`` and ``(predicate, domain)`` pairs."""

    subject: Domain
    patterns: tuple[tuple[URI, Domain], ...]
    predicates: frozenset[URI] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        ordered = tuple(sorted(((_interned(p), d) for p, d in self.patterns), key=_pattern_key))
        object.__setattr__(self, "patterns", ordered)
        object.__setattr__(self, "predicates", frozenset(p for p, _ in ordered))

    def sort_key(self) -> tuple[str, list[tuple[str, str]]]:
        return (repr(self.subject), [_pattern_key(pattern) for pattern in self.patterns])


_PREDICATES: dict[URI, URI] = {}
_INTERNED_AT_MOST = 100_000


def _interned(predicate: URI) -> URI:
    """One object per predicate across every filter: set operations on ``predicates`` (covering
    and placement do millions) then find each element by identity, without comparing URIs.
    Bounded (a vocabulary is small; past the bound a predicate is simply not shared): nothing
    depends on it but speed."""
    if len(_PREDICATES) >= _INTERNED_AT_MOST:
        return _PREDICATES.get(predicate, predicate)
    return _PREDICATES.setdefault(predicate, predicate)


def _pattern_key(pattern: tuple[URI, Domain]) -> tuple[str, str]:
    return (pattern[0].value, repr(pattern[1]))


def filter_within(inner: Filter, outer: Filter) -> bool:
    """Sufficient test that every publication matching ``inner`` matches ``outer``.

    Each pattern of ``outer`` must be implied by some pattern of ``inner`` on the same predicate;
    exact when no predicate repeats (see ``qel.covering`` for the complete test over unions).
    Patterns are sorted by predicate, so when no predicate of ``inner`` repeats, each pattern of
    ``outer`` has its one counterpart found by a merge, not a search (covering placements ask
    this hundreds of thousands of times).
    """
    if not outer.predicates <= inner.predicates:
        return False
    if not domains.subset(inner.subject, outer.subject):
        return False
    patterns = inner.patterns
    if len(patterns) != len(inner.predicates):
        return all(
            any(
                predicate == inner_predicate and domains.subset(inner_domain, outer_domain)
                for inner_predicate, inner_domain in patterns
            )
            for predicate, outer_domain in outer.patterns
        )
    position = 0
    subset = domains.subset
    for predicate, outer_domain in outer.patterns:
        name = predicate.value
        while patterns[position][0].value != name:
            position += 1
        if type(outer_domain) is not domains.AnyDomain and not subset(
            patterns[position][1], outer_domain
        ):
            return False
    return True


def simplify(filters: list[Filter]) -> tuple[Filter, ...]:
    """Sorted, de-duplicated, without filters that another filter of the same set contains."""
    kept: list[Filter] = []
    for candidate in sorted(set(filters), key=Filter.sort_key):
        if any(filter_within(candidate, other) for other in kept):
            continue
        kept = [other for other in kept if not filter_within(other, candidate)]
        kept.append(candidate)
    return tuple(sorted(kept, key=Filter.sort_key))


WITNESS_SEPARATOR = "\ue000"
"""Joins ``contains`` substrings in witnesses: a private-use character no query is expected to use,
so the witness contains as few other substrings as possible."""
FRESH_URI = URI("urn:qel:witness:any")


_RECENT_WITNESSES: dict[int, tuple[Filter, Publication]] = {}
_RECENT_AT_MOST = 256


def witness(compiled: Filter) -> Publication:
    """A publication that matches ``compiled``, with one object per pattern.

    Every subscription that covers the filter matches it, which makes it a cheap necessary test when
    looking for covering subscriptions. Unconstrained objects are a fresh URI and ``contains``
    objects join the substrings with ``WITNESS_SEPARATOR``, so the witness matches as few other
    subscriptions as possible.

    The witnesses of the last ``_RECENT_AT_MOST`` filters are kept, by identity: placing one
    subscription asks for its witnesses several times (the chains, then what was sent), and in the
    simulator one subscription object travels through dozens of super-peers in a row. Filters and
    publications are immutable, so a kept witness is the one that would be built again; a filter
    does not keep its own (that would cost every held subscription its witness's memory).
    """
    key = id(compiled)
    kept = _RECENT_WITNESSES.get(key)
    if kept is not None and kept[0] is compiled:
        return kept[1]
    made = _witness(compiled)
    if len(_RECENT_WITNESSES) >= _RECENT_AT_MOST:
        del _RECENT_WITNESSES[next(iter(_RECENT_WITNESSES))]
    _RECENT_WITNESSES[key] = (compiled, made)
    return made


def _witness(compiled: Filter) -> Publication:
    statements = set()
    for predicate, domain in compiled.patterns:
        if isinstance(domain, domains.ContainsDomain):
            term: Term = Literal(WITNESS_SEPARATOR.join(domain.substrings))
        else:
            term = domains.witness(domain) or FRESH_URI
        statements.add((predicate, term))
    from qel.model import Publication

    subject = (
        compiled.subject.term if isinstance(compiled.subject, domains.PointDomain) else FRESH_URI
    )
    return Publication(subject, frozenset(statements))  # type: ignore[arg-type]
