"""A necessary condition for covering, several dimensions at once: a DNF subscription covers a
filter only if no publication of the filter, taking each of its ranges at one end, escapes every
filter of the subscription.

Why. After ``poset.gaps`` (one dimension at a time), the "no"s of DNF covering tests on the
shapes workload mostly need two dimensions: ``power <= 356, registered < 2003`` is not covered
by ``registered in 2019..2024 ; power > 90`` (low power escapes the second alternative, an early
registration the first). ``qel.covering.filter_covered`` finds such a point through its corners,
the search along one predicate, its escape (which builds these very points) or the cell search:
11 to 66 microseconds a filter (issue 34, stop 57). Here the general side is compiled once
(``Alternatives``: per filter, the domain on each predicate it constrains) and a filter is
refuted by comparing bounds, with bit masks for the choice.

Exactness (a refutation only; a "maybe" leaves the answer to the full test). Let ``F`` be a
filter whose predicates do not repeat and ``H1..Hk`` the general side's filters. A publication
with one object per pattern of ``F``, each in that pattern's domain, and a subject in ``F``'s
subject domain, matches ``F``. ``Hi`` rejects it if ``Hi`` has a predicate ``F`` lacks (no
object there), or a subject domain that rejects the subject, or, on a predicate ``p``, a domain
``e`` (its patterns on ``p`` intersected; an empty intersection rejects all) that rejects the
one object on ``p``. Per dimension of ``F`` the objects tried are:

* a fixed value, a ``contains`` domain's substrings joined (``qel.covering``'s middle cell), a
  point range: that one value, tested with ``admits``; an unconstrained object: a fresh term,
  which every constraint domain rejects (so does a subject domain that is not every term);
* a range of more than one value: its *low* end, and its *high* end. An included end is that
  value. An excluded finite end ``l`` stands for values just above ``l``: ``e`` rejects all those
  close enough to ``l`` unless ``e`` is a range of the kind with its low end at most ``l`` and
  its high end above ``l``. An unbounded end stands for values far enough out: ``e`` rejects
  them unless it is a range of the kind unbounded there. For each filter that rejects, the
  values that do form a non-empty end of the range, and finitely many such ends meet: one value
  rejected by all of them exists.

If one object per dimension can be chosen so that every ``Hi`` rejects the publication, it is a
publication of ``F`` that no ``Hi`` matches: the subscription does not cover ``F``.

The other way (``proves``, a sufficient condition): if each ``Hi`` of a set has only predicates
``F`` has, admits ``F``'s subject domain, and on every predicate but ``p`` (the same ``p`` for
all; the subject counts as one) holds ``F``'s domain within its own, then a publication of
``F`` is matched by one of them as soon as its object in ``F``'s domain on ``p`` lies in that
``Hi``'s domain there: the set covers ``F`` when the union of those domains (``poset.gaps``'s
``Column``) holds ``F``'s domain on ``p``. One ``Hi`` holding ``F`` everywhere is the case of no
``p`` (``filter_within``). Why: the "yes"es that ``filter_covered`` found by its search along
one predicate or its cells (a broad DNF splitting one range: ``P > 898, P <= 58000 ; P >=
8612`` over ``P > 946``) took 40 to 100 microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping

from poset.gaps import SUBJECT, Column, repeats
from qel.domains import (
    AnyDomain,
    ContainsDomain,
    Domain,
    PointDomain,
    RangeDomain,
    intersect,
    subset,
)
from qel.filters import WITNESS_SEPARATOR, Filter
from qel.terms import KIND_STRING

Alternative = tuple[frozenset[object], Domain | None, Mapping[int, Domain | None]]
"""A filter of the general side: its predicates, its subject domain (None: every subject), and
per predicate it constrains (by identity: filters share one object per predicate) the domain
there, None when its patterns there admit nothing together."""

Alternatives = tuple[Alternative, ...]


def alternatives(filters: tuple[Filter, ...]) -> Alternatives:
    """The general side as ``refutes`` reads it."""
    found = []
    for compiled in filters:
        held: dict[int, Domain | None] = {}
        repeated = len(compiled.patterns) != len(compiled.predicates)
        for predicate, domain in compiled.patterns:
            if type(domain) is AnyDomain:
                continue
            key = id(predicate)
            if repeated and key in held:
                held[key] = intersect(held[key], domain)
            else:
                held[key] = domain
        subject = None if type(compiled.subject) is AnyDomain else compiled.subject
        found.append((compiled.predicates, subject, held))
    return tuple(found)


def proves(general: Alternatives, part: Filter) -> bool:
    """Whether ``general`` covers ``part`` because the filters of ``general`` that hold ``part``
    on every dimension but one, the same one, hold it there together (module docstring); the
    filters that hold it on every dimension are among them."""
    patterns = part.patterns
    if len(patterns) != len(part.predicates):
        return False
    own = {id(predicate): domain for predicate, domain in patterns}
    along: dict[object, list[Domain]] = {}
    subject = part.subject
    for predicates, outer, held in general:
        if not predicates <= part.predicates:
            continue
        narrowed: object = None
        if outer is not None and not subset(subject, outer):
            narrowed = SUBJECT
        for key, domain in held.items():
            inner = own.get(key)
            if inner is None or domain is None:
                break  # not known, or nothing: this filter admits nothing of ``part`` here
            if subset(inner, domain):
                continue
            if narrowed is not None:
                break
            narrowed = key
        else:
            if narrowed is None:
                return True
            domain = outer if narrowed is SUBJECT else held[narrowed]  # type: ignore[index]
            along.setdefault(narrowed, []).append(domain)  # type: ignore[arg-type]
    for key, held_there in along.items():
        if len(held_there) > 1 and Column(tuple(held_there)).holds(
            subject if key is SUBJECT else own[key]  # type: ignore[index]
        ):
            return True
    return False


def has_gap(general: Alternatives, part: Filter) -> bool:
    """``poset.gaps.escapes`` read from the alternatives, for a general side tested once (a
    node; a probe, tested tens of times, keeps its ``poset.gaps.columns``): whether ``part`` has
    a value, on its subject or on a predicate it has once, that no filter of ``general`` admits
    there. A dimension is one every filter constrains (a key of each ``held``, or a subject
    domain each); ``part``'s domain there escapes unless one filter's domain holds it
    (``subset``) or, failing that, their union does (``Column``, built then only). Why: a
    node's columns were built for each test, 6.4 microseconds of a node's 16 on shapes, while
    most of its "yes"es need the alternatives anyway and most domains lie within one filter's
    (issue 34, stop 60)."""
    subjects = [outer for _, outer, _ in general]
    if None not in subjects:
        inner = part.subject
        if not any(subset(inner, outer) for outer in subjects) and not Column(
            tuple(subjects)  # type: ignore[arg-type]
        ).holds(inner):
            return True
    patterns = part.patterns
    repeated = len(patterns) != len(part.predicates)
    for position, (predicate, domain) in enumerate(patterns):
        if repeated and repeats(patterns, position):
            continue
        key = id(predicate)
        union: list[Domain] = []
        for _, _, held in general:
            outer = held.get(key, _UNCONSTRAINED)
            if outer is _UNCONSTRAINED:
                break  # this filter admits any object there: no gap
            if outer is not None:  # None: this filter admits no object there
                if subset(domain, outer):
                    break
                union.append(outer)  # type: ignore[arg-type]
        else:
            if not Column(tuple(union)).holds(domain):
                return True
    return False


_UNCONSTRAINED = object()


def refutes(general: Alternatives, part: Filter) -> bool:
    """Whether some publication of ``part`` at the ends of its ranges escapes every filter of
    ``general`` (module docstring): then ``general`` does not cover ``part``."""
    patterns = part.patterns
    if len(patterns) != len(part.predicates):
        return False
    own = {id(predicate): domain for predicate, domain in patterns}
    needed = 0  # the filters no object has to reject: a predicate ``part`` lacks rejects them
    always = 0  # rejected whatever the choice
    lows: dict[int, int] = {}  # per range of ``part`` (by predicate), who rejects its low end
    highs: dict[int, int] = {}
    subject = part.subject
    for position, (predicates, outer, held) in enumerate(general):
        bit = 1 << position
        if not predicates <= part.predicates:
            continue
        needed |= bit
        if outer is not None and _rejects_subject(outer, subject):
            always |= bit
            continue
        for key, domain in held.items():
            inner = own.get(key)
            if inner is None:
                continue  # a predicate not shared (past the interning bound): not known
            if type(inner) is RangeDomain and not inner.is_point:
                if _rejects_end(domain, inner, low=True):
                    lows[key] = lows.get(key, 0) | bit
                if _rejects_end(domain, inner, low=False):
                    highs[key] = highs.get(key, 0) | bit
            elif _rejects_one(domain, inner):
                always |= bit
                break
    needed &= ~always
    if not needed:
        return True
    choices = []
    for key in lows.keys() | highs.keys():
        low, high = lows.get(key, 0) & needed, highs.get(key, 0) & needed
        if low | high == low:
            always |= low
        elif low | high == high:
            always |= high
        else:
            choices.append((low, high))
    return _chosen(needed & ~always, choices)


def _chosen(needed: int, choices: list[tuple[int, int]]) -> bool:
    """Whether one mask of each pair can be taken so that together they hold ``needed``."""
    if not needed:
        return True
    if not choices:
        return False
    reach = 0
    for low, high in choices:
        reach |= low | high
    if needed & ~reach:
        return False
    (low, high), rest = choices[0], choices[1:]
    return _chosen(needed & ~low, rest) or _chosen(needed & ~high, rest)


def _rejects_subject(outer: Domain, subject: Domain) -> bool:
    """Whether the subject domain ``outer`` (not every term) rejects a subject of ``subject``:
    a fresh term for any subject, the fixed one itself (another kind of domain: not known)."""
    if type(subject) is AnyDomain:
        return True
    if type(subject) is PointDomain:
        return not outer.admits(subject.kind, subject.value)
    return False


def _rejects_one(domain: Domain | None, inner: Domain) -> bool:
    """Whether ``domain`` (a constraint, or None: nothing) rejects the one object chosen for a
    dimension that is not a range of several values."""
    if domain is None:
        return True
    kind = type(inner)
    if kind is AnyDomain:
        return True  # a fresh term
    if kind is PointDomain:
        return not domain.admits(inner.kind, inner.value)  # type: ignore[union-attr]
    if kind is RangeDomain:
        return not domain.admits(inner.kind, inner.low)  # type: ignore[union-attr]
    assert type(inner) is ContainsDomain
    text = WITNESS_SEPARATOR + WITNESS_SEPARATOR.join(inner.substrings) + WITNESS_SEPARATOR
    return not domain.admits(KIND_STRING, text)


def _rejects_end(domain: Domain | None, inner: RangeDomain, *, low: bool) -> bool:
    """Whether ``domain`` rejects ``inner``'s values at its low (else high) end: the end itself
    if included, else every value close enough to it (module docstring)."""
    if domain is None:
        return True
    end, included = (inner.low, inner.low_inclusive) if low else (inner.high, inner.high_inclusive)
    if end is not None and included:
        return not domain.admits(inner.kind, end)
    if type(domain) is not RangeDomain or domain.kind != inner.kind:
        return True  # a finite set of values, or another kind
    if end is None:
        return (domain.low if low else domain.high) is not None
    if low:
        return (domain.low is not None and domain.low > end) or (
            domain.high is not None and domain.high <= end
        )
    return (domain.high is not None and domain.high < end) or (
        domain.low is not None and domain.low >= end
    )
