"""Subscription covering: ``covers(general, specific)`` iff every publication matching ``specific``
also matches ``general`` (the Boolean reading of Definition 3, which is what routing needs).

Method. ``specific`` is a union of filters (``qel.filters``); it is covered iff each of its filters F
is covered by the union of ``general``'s filters H1..Hk. For one F, a counterexample is a publication
that matches F and no Hi. Adding triples to a publication only helps the Hi (their tests are
existential), so it suffices to look at publications holding exactly one object per pattern of F.
Each pattern of F (and the subject) is a dimension; its possible objects split into finitely many
*cells* that every Hi treats alike:

* a fixed value (``X = c``): one cell, the value itself;
* no constraint: one cell, a fresh term that only an unconstrained Hi pattern accepts;
* ``contains s1 .. sn``: one cell, the string ``#s1#..#sn#`` with ``#`` a character found in no
  constant. It contains exactly the substrings of the si, so it is accepted by the fewest Hi: the
  worst case for F, and therefore the only one to check;
* a number or date range: the points and open intervals cut out by every bound that an Hi puts on the
  same predicate, plus the infinities for an unbounded numeric end.

A depth-first search over the cells of each dimension looks for an assignment that no Hi accepts,
pruning a branch as soon as some Hi is satisfied whatever the rest, or no Hi can be satisfied.

Soundness and completeness. The search is exact for every subscription of the language, including
repeated predicates and DNF whose disjuncts only jointly cover. It is incomplete in exactly one place:
when a single filter needs more than ``budget`` search steps (many interleaved ranges over many
predicates), it stops and answers "does not cover", the safe answer (it only costs extra messages).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Sequence
from fractions import Fraction
from typing import Final

from qel.domains import (
    AnyDomain,
    ContainsDomain,
    Domain,
    PointDomain,
    RangeDomain,
    overlaps,
    range_sample,
    subset,
)
from qel.filters import WITNESS_SEPARATOR, Filter, filter_within
from qel.model import Subscription
from qel.terms import KIND_NUMBER, KIND_STRING

DEFAULT_BUDGET: Final = 20_000
"""Search steps allowed per filter before ``covers`` gives up and answers False."""

_FRESH: Final = ("fresh", None)
Cell = tuple[str, object]


def covers(general: Subscription, specific: Subscription, *, budget: int = DEFAULT_BUDGET) -> bool:
    """Sound always; complete unless the search budget runs out (see the module docstring)."""
    if general.key == specific.key:
        return True
    return all(filter_covered(part, general.filters, budget=budget) for part in specific.filters)


def filter_covered(
    target: Filter | Target, candidates: Sequence[Filter], *, budget: int = DEFAULT_BUDGET
) -> bool:
    """Whether every publication matching ``target`` matches one of ``candidates``; ``target``
    as a ``Target`` when the caller tests it against many (what it derives is then reused)."""
    if isinstance(target, Target):
        prepared: Target | None = target
        compiled = target.filter
    else:
        prepared, compiled = None, target
    usable = [h for h in candidates if h.predicates <= compiled.predicates]
    if not usable:
        return False
    if any(filter_within(compiled, h) for h in usable):
        return True
    if len(usable) == 1 and len(compiled.predicates) == len(compiled.patterns):
        return False  # ``filter_within`` is exact against one filter when no predicate repeats
    if prepared is None:
        prepared = Target(compiled)
    if _corner_refutes(prepared, usable):
        return False
    along = _along_one_predicate(compiled, usable)
    if along is not None:
        return along
    if _escape_refutes(prepared, usable):
        return False
    return _CellSearch(compiled, usable, budget).run()


class Target:
    """A filter as the target of covering tests, with what every test against it derives from
    it alone, kept: the subject of the points tried (``_subject_cell``, at once) and its corners
    and middle (``_corner``, each on first use). Why: placing a subscription
    tests it against tens of nodes, and each test that reached the corners built the same
    three points again (a placement holds one ``Target`` per filter of its subscription, for as
    long as it lasts; a held node keeps none, which would cost memory per subscription). The
    filter is immutable, so what is kept is what would be built again: the answers are those of
    the filter itself."""

    __slots__ = ("_corners", "_middle", "filter", "subject_cell")

    def __init__(self, compiled: Filter) -> None:
        self.filter = compiled
        self.subject_cell = _subject_cell(compiled)
        self._corners: list[dict[object, list[Cell]] | None] = []
        self._middle: dict[object, list[Cell]] | None = None

    def corners(self) -> Iterator[dict[object, list[Cell]]]:
        """The decided ones of the upper corner, the lower corner and the middle, in order, each
        built when first reached (a test that the upper corner refutes builds no other)."""
        built = self._corners
        for position, upper in enumerate((True, False)):
            if len(built) == position:
                built.append(_corner(self.filter, upper))
            point = built[position]
            if point is not None:
                yield point
        yield self.middle()

    def middle(self) -> dict[object, list[Cell]]:
        """The middle (``_corner`` with ``upper`` None: always decided), built once."""
        if self._middle is None:
            middle = _corner(self.filter, None)
            assert middle is not None, "a middle is always decided"
            self._middle = middle
        return self._middle


_INFINITE: Final = {False: float("-inf"), True: float("inf")}


def _corner_refutes(target: Target, candidates: list[Filter]) -> bool:
    """Whether one of two corners of ``target``, or its middle (``_corner``), matches no
    candidate: a counterexample found without the search (sound: each is a publication matching
    ``target``; an undecided corner decides nothing, and the search runs).

    A corner takes every range of ``target`` at its upper end (then, the other corner, its lower
    end): an included bound, or an infinity for an unbounded number range; an unconstrained
    object or subject is the fresh term (which only an unconstrained domain accepts), a fixed
    value is itself. A range with an excluded bound, a date range without a bound or a
    ``contains`` leaves that corner undecided. This is what refutes covering between DNF
    subscriptions where one alternative is wider (``P <= 900000 ; S >= 50`` against
    ``P <= 800000 ; S >= 50``): the search would build and walk the cells to find that corner.
    """
    subject_cell = target.subject_cell
    if subject_cell is None:
        return False
    admitting = [candidate for candidate in candidates if candidate.subject.admits(*subject_cell)]
    for point in target.corners():
        if not any(_admits_point(candidate, point) for candidate in admitting):
            return True
    return False


def _subject_cell(target: Filter) -> Cell | None:
    """The subject of every point ``_corner_refutes`` and ``_escape_refutes`` try: the fresh
    term for any subject, the fixed one itself; None (nothing tried) for another domain."""
    subject = target.subject
    if isinstance(subject, AnyDomain):
        return _FRESH
    if isinstance(subject, PointDomain):
        return (subject.kind, subject.value)
    return None


def _corner(target: Filter, upper: bool | None) -> dict[object, list[Cell]] | None:
    """The upper corner of ``target`` (``upper``), its lower corner, or (None) its middle: every
    range at a value inside it (``domains.range_sample``, whatever its ends), every ``contains``
    at its substrings joined by ``WITNESS_SEPARATOR`` (any string holding them all is in the
    target; this one holds few others). None when that corner is undecided."""
    point: dict[object, list[Cell]] = {}
    for predicate, domain in target.patterns:
        kind = type(domain)
        if kind is AnyDomain:
            cell: Cell = _FRESH
        elif kind is PointDomain:
            cell = (domain.kind, domain.value)  # type: ignore[union-attr]
        elif kind is RangeDomain and upper is None:
            cell = (domain.kind, range_sample(domain))  # type: ignore[union-attr, arg-type]
        elif kind is RangeDomain:
            bound, inclusive = (
                (domain.high, domain.high_inclusive)  # type: ignore[union-attr]
                if upper
                else (domain.low, domain.low_inclusive)  # type: ignore[union-attr]
            )
            if bound is not None:
                if not inclusive:
                    return None
                cell = (domain.kind, bound)  # type: ignore[union-attr]
            elif domain.kind == KIND_NUMBER:  # type: ignore[union-attr]
                cell = (KIND_NUMBER, _INFINITE[upper])
            else:
                return None
        elif upper is None:
            joined = WITNESS_SEPARATOR.join(domain.substrings)  # type: ignore[union-attr]
            cell = (KIND_STRING, WITNESS_SEPARATOR + joined + WITNESS_SEPARATOR)
        else:
            return None
        point.setdefault(predicate.value, []).append(cell)
    return point


def _admits_point(candidate: Filter, point: dict[object, list[Cell]]) -> bool:
    """Whether ``candidate``'s patterns accept the publication with these objects."""
    for predicate, domain in candidate.patterns:
        cells = point.get(predicate.value)
        if cells is None or not any(domain.admits(*cell) for cell in cells):
            return False
    return True


def _along_one_predicate(target: Filter, candidates: list[Filter]) -> bool | None:
    """The exact answer when the candidates that admit some point of ``target`` narrow it on
    one and the same predicate only (each of their other patterns, and their subject, holds the
    target's whole domain there); None, for the search to decide, otherwise.

    Why: on shapes of every kind, most covering tests that the cell search answered "covers" are
    a broad DNF whose alternatives split one range between them (``price > 898, price <= 58000 ;
    price >= 8612`` over ``price > 946, type = Van``), and the search built the cells of every
    dimension of the target to find it. Exact: for a target whose predicates do not repeat (one
    value per predicate at each of its points), such a candidate admits a point iff its patterns
    on that predicate admit the point's value there; a candidate whose subject or some pattern
    admits nothing of the target's admits no point of it (``overlaps``), and one that narrows
    nothing admits every point. So ``target`` is covered iff every cell of its domain on that
    predicate, cut by the candidates' bounds there (the cells of the search, along that one
    dimension), is admitted by some candidate's patterns on it."""
    if len(target.patterns) != len(target.predicates):
        return None
    own = {predicate.value: domain for predicate, domain in target.patterns}
    axis: str | None = None
    narrowing: list[list[Domain]] = []
    for candidate in candidates:
        if not subset(target.subject, candidate.subject):
            if overlaps(target.subject, candidate.subject):
                return None
            continue  # it admits no subject of the target's
        on_axis: list[Domain] = []
        for predicate, domain in candidate.patterns:
            name = predicate.value
            held = own[name]
            if type(domain) is AnyDomain or subset(held, domain):
                continue
            if not overlaps(held, domain):
                break  # it admits no point of the target
            if axis is None:
                axis = name
            elif name != axis:
                return None
            on_axis.append(domain)
        else:
            if not on_axis:
                return True
            narrowing.append(on_axis)
    if axis is None:
        return False
    domain = own[axis]
    if type(domain) is RangeDomain:
        bounds = {
            bound
            for held in narrowing
            for other in held
            if type(other) is RangeDomain and other.kind == domain.kind
            for bound in (other.low, other.high)
            if bound is not None
        }
        cells = _range_cells(domain, bounds)
    else:
        separator = _separator(target, candidates) if type(domain) is ContainsDomain else ""
        cells = _cells(domain, (), separator)
    return all(
        any(all(other.admits(*cell) for other in held) for held in narrowing) for cell in cells
    )


_ESCAPE_STEPS: Final = 64
"""Most steps ``_escape_refutes`` takes looking for its point before leaving it to the search."""


def _escape_refutes(prepared: Target, candidates: list[Filter]) -> bool:
    """Whether a point of ``target`` that each candidate rejects on some predicate is found
    among few: per pattern, its value in the topmost cell of its range (the cells that the
    candidates' bounds cut out, as the search's), in the bottommost, or its middle (a fixed
    value, a fresh term, a ``contains`` string: the one cell ``_corner`` takes); then a small
    search for a choice per pattern that escapes every candidate.

    Why: after the corners, the covering tests that reach the cell search on shapes of every
    kind mostly answer "no" (the search's set-up then costs more than its walk), and their
    counterexample mixes corners: ``mileage <= 101505, consumption < 12.96`` against
    ``mileage <= 50000 ; 11.42 <= consumption < 14.09`` escapes the first alternative at the top
    of the mileage and the second at the bottom of the consumption, which neither corner alone
    does. Sound: the point is built inside ``target`` and checked against every candidate
    (``_admits_point``) before it refutes; when nothing is found the search decides. Only for a
    target whose predicates do not repeat (one value per predicate: a candidate rejects the
    point iff one of its patterns rejects that predicate's value)."""
    target = prepared.filter
    if len(target.patterns) != len(target.predicates):
        return False
    subject_cell = prepared.subject_cell
    if subject_cell is None:
        return False
    middle = prepared.middle()
    options: dict[str, list[Cell]] = {}
    for predicate, domain in target.patterns:
        name = predicate.value
        cells = middle[name]
        if type(domain) is RangeDomain:
            for upper in (True, False):
                value = _end_cell(domain, name, candidates, upper)
                if value is not None and (domain.kind, value) not in cells:
                    cells = [*cells, (domain.kind, value)]
        options[name] = cells
    # per candidate still to escape, per predicate, the options it rejects there (bits)
    rejects: list[dict[str, int]] = []
    for candidate in candidates:
        if not candidate.subject.admits(*subject_cell):
            continue
        where: dict[str, int] = {}
        for predicate, domain in candidate.patterns:
            name = predicate.value
            refused = where.get(name, 0)
            for option, cell in enumerate(options[name]):
                if not domain.admits(*cell):
                    refused |= 1 << option
            if refused:
                where[name] = refused
        if not where:
            return False  # it admits every option of every pattern: no point here escapes it
        rejects.append(where)
    choice: dict[str, int] = {}
    if not _escape(rejects, 0, choice, [_ESCAPE_STEPS]):
        return False
    point = {name: [cells[choice.get(name, 0)]] for name, cells in options.items()}
    return not any(
        candidate.subject.admits(*subject_cell) and _admits_point(candidate, point)
        for candidate in candidates
    )


def _end_cell(
    domain: RangeDomain, name: str, candidates: list[Filter], upper: bool
) -> object | None:
    """A value of ``domain`` (the range of predicate ``name``) in its topmost (``upper``) or
    bottommost cell among the candidates' bounds on that predicate: an included end itself, an
    infinity for an unbounded number range, else a value beyond the last bound inside before
    that end (None for an unbounded date range with no bound inside: the middle stands)."""
    end, inclusive = (
        (domain.high, domain.high_inclusive) if upper else (domain.low, domain.low_inclusive)
    )
    if end is not None and inclusive:
        return end
    kind = domain.kind
    if end is None and kind == KIND_NUMBER:
        return _INFINITE[upper]
    other = domain.low if upper else domain.high
    marks = [] if other is None else [other]
    for candidate in candidates:
        for predicate, held in candidate.patterns:
            if type(held) is RangeDomain and held.kind == kind and predicate.value == name:
                marks += [
                    b for b in (held.low, held.high) if b is not None and domain.admits(kind, b)
                ]
    if end is None:
        if not marks:
            return None
        value = max(marks) + 1 if upper else min(marks) - 1  # type: ignore[type-var, operator]
    elif marks:
        value = _between(max(marks), end) if upper else _between(end, min(marks))  # type: ignore[type-var, arg-type]
    else:
        value = end - 1 if upper else end + 1  # type: ignore[operator]
    return value if domain.admits(kind, value) else None


def _escape(
    rejects: list[dict[str, int]], at: int, choice: dict[str, int], steps: list[int]
) -> bool:
    """Whether options can be chosen (``choice``: predicate -> option; the middle where none
    is, which no candidate relies on) so that every candidate from ``at`` on rejects one chosen
    option, given those already chosen; a depth-first search of at most ``steps[0]`` steps
    (False when they run out: the cell search then decides)."""
    if at == len(rejects):
        return True
    steps[0] -= 1
    if steps[0] < 0:
        return False
    where = rejects[at]
    for name, refused in where.items():
        if name in choice and refused >> choice[name] & 1:
            return _escape(rejects, at + 1, choice, steps)
    for name, refused in where.items():
        if name in choice:
            continue  # chosen for an earlier candidate, and not an option this one refuses
        option = 0
        while refused >> option:
            if refused >> option & 1:
                choice[name] = option
                if _escape(rejects, at + 1, choice, steps):
                    return True
                del choice[name]
            option += 1
    return False


class _BudgetExhausted(Exception):
    pass


class _CellSearch:
    def __init__(self, target: Filter, candidates: list[Filter], budget: int) -> None:
        self.budget = budget
        separator = (
            _separator(target, candidates)
            if any(type(domain) is ContainsDomain for _, domain in target.patterns)
            else ""  # only a ``contains`` cell uses it
        )
        # Dimension 0 is the subject; dimension i > 0 is target pattern i - 1.
        dimensions: list[tuple[object, Domain]] = [(None, target.subject)]
        dimensions += list(target.patterns)
        bounds = _bounds_by_predicate(candidates)
        cells = [
            _cells(
                domain,
                bounds.get((key, domain.kind), ())  # type: ignore[union-attr]
                if key is not None and type(domain) is RangeDomain
                else (),
                separator,
            )
            for key, domain in dimensions
        ]
        order = sorted(range(len(dimensions)), key=lambda i: (i != 0, len(cells[i])))
        self.keys = [dimensions[i][0] for i in order]
        self.cells = [cells[i] for i in order]
        self.assigned: list[Cell | None] = [None] * len(order)
        depth_of_key: dict[object, list[int]] = {}
        for depth, key in enumerate(self.keys):
            depth_of_key.setdefault(key, []).append(depth)
        self.plans: list[_Plan] = [
            (
                None if type(candidate.subject) is AnyDomain else candidate.subject,
                tuple(
                    (domain, tuple(depth_of_key[predicate]))
                    for predicate, domain in candidate.patterns
                ),
            )
            for candidate in candidates
        ]

    def run(self) -> bool:
        try:
            return self._search(0, self.plans)
        except _BudgetExhausted:
            return False

    def _search(self, depth: int, alive: list[_Plan]) -> bool:
        """True if every completion of the assignment so far is matched by some alive filter."""
        self.budget -= 1
        if self.budget < 0:
            raise _BudgetExhausted
        still: list[_Plan] = []
        for plan in alive:
            verdict = self._verdict(plan, depth)
            if verdict is True:
                return True
            if verdict is None:
                still.append(plan)
        if not still or depth == len(self.keys):
            return False
        for cell in self.cells[depth]:
            self.assigned[depth] = cell
            if not self._search(depth + 1, still):
                self.assigned[depth] = None
                return False
        self.assigned[depth] = None
        return True

    def _verdict(self, plan: _Plan, depth: int) -> bool | None:
        """True: satisfied whatever comes next; False: can no longer be; None: undecided."""
        undecided = False
        subject, patterns = plan
        assigned = self.assigned
        if subject is not None:
            if depth == 0:  # the subject is dimension 0, assigned first
                undecided = True
            elif not subject.admits(*assigned[0]):  # type: ignore[misc]
                return False
        for domain, positions in patterns:
            hit = False
            pending = False
            for position in positions:
                if position >= depth:
                    pending = True
                    continue
                if domain.admits(*assigned[position]):  # type: ignore[misc]
                    hit = True
                    break
            if hit:
                continue
            if not pending:
                return False
            undecided = True
        return None if undecided else True


_Plan = tuple[Domain | None, tuple[tuple[Domain, tuple[int, ...]], ...]]
"""A candidate filter as the search reads it: its subject's domain (None for any subject), and
per pattern its domain with the depths of the target's dimensions on the same predicate (found
once per search: a look-up per pattern and step, hashing a predicate each time, was a tenth of
the search)."""


def _separator(target: Filter, candidates: list[Filter]) -> str:
    used: set[str] = set()
    for compiled in (target, *candidates):
        for _, domain in compiled.patterns:
            if isinstance(domain, ContainsDomain):
                used.update(*domain.substrings)
            elif isinstance(domain, PointDomain) and domain.kind == KIND_STRING:
                used.update(domain.value)  # type: ignore[arg-type]
    code = 0xE000
    while chr(code) in used:
        code += 1
    return chr(code)


def _bounds_by_predicate(candidates: list[Filter]) -> dict[tuple[object, str], set[object]]:
    """Per predicate and kind, the range bounds the candidates put on it (one pass over their
    patterns, where a pass per dimension of the target was a fifth of a search)."""
    bounds: dict[tuple[object, str], set[object]] = {}
    for candidate in candidates:
        for predicate, other in candidate.patterns:
            if type(other) is RangeDomain:
                held = bounds.get((predicate, other.kind))
                if held is None:
                    held = bounds[predicate, other.kind] = set()
                if other.low is not None:
                    held.add(other.low)
                if other.high is not None:
                    held.add(other.high)
    return bounds


def _cells(domain: Domain, bounds: Collection[object], separator: str) -> list[Cell]:
    if isinstance(domain, AnyDomain):
        return [_FRESH]
    if isinstance(domain, PointDomain):
        return [(domain.kind, domain.value)]
    if isinstance(domain, ContainsDomain):
        text = separator + separator.join(domain.substrings) + separator
        return [(KIND_STRING, text)]
    return _range_cells(domain, bounds)


def _range_cells(domain: RangeDomain, bounds: Collection[object]) -> list[Cell]:
    kind = domain.kind
    if domain.is_point:
        return [(kind, domain.low)]
    inside = [b for b in bounds if domain.admits(kind, b)]
    markers = sorted(
        {*inside, *(b for b in (domain.low, domain.high) if b is not None)}  # type: ignore[type-var]
    )
    representatives: list[object] = list(inside)
    if domain.low_inclusive:
        representatives.append(domain.low)
    if domain.high_inclusive:
        representatives.append(domain.high)
    representatives += [_between(a, b) for a, b in itertools.pairwise(markers)]
    if markers:
        if domain.low is None:
            representatives.append(markers[0] - 1)  # type: ignore[operator]
        if domain.high is None:
            representatives.append(markers[-1] + 1)  # type: ignore[operator]
    else:
        representatives.append(0)
    if kind == KIND_NUMBER:
        if domain.low is None:
            representatives.append(float("-inf"))
        if domain.high is None:
            representatives.append(float("inf"))
    unique = {value for value in representatives if domain.admits(kind, value)}
    return [(kind, value) for value in sorted(unique)]  # type: ignore[type-var]


def _between(low: int | Fraction, high: int | Fraction) -> int | Fraction:
    """A value strictly between two bounds (``low < high``): any one stands for the open interval
    between two consecutive bounds, where every candidate answers alike. An integer when there
    is one (most bounds are integers, and a ``Fraction`` costs some microseconds to build and to
    compare), else the middle."""
    if type(low) is int and type(high) is int and high - low >= 2:
        return low + 1
    return Fraction(low + high) / 2
