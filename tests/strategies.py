"""Hypothesis strategies over a deliberately small vocabulary, so that values collide often.

Shared by the language, poset, index and routing tests. Everything generated is inside the language;
``sparql_safe`` variants avoid the three places where the language deliberately departs from SPARQL
(language tags, value equality of constants in object position, mixing xsd:date with xsd:dateTime).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

from hypothesis import strategies as st

from qel import (
    URI,
    Advertisement,
    Atom,
    Constraint,
    Literal,
    Pattern,
    Publication,
    QueryError,
    Subscription,
)
from qel import domains as dom
from qel.axioms import DOMAIN, RANGE, SUBCLASS, SUBPROPERTY, Axiom
from qel.terms import RDF_TYPE, XSD_DATE, XSD_DECIMAL, XSD_DOUBLE, instant_literal, number

DC = "http://purl.org/dc/elements/1.1/"
EX = "http://example.org/"

CREATOR = URI(DC + "creator")
TITLE = URI(DC + "title")
DATE = URI(DC + "date")
SUBJECT = URI(DC + "subject")
ISSUED = URI(EX + "issued")
PREDICATES = [CREATOR, TITLE, DATE, SUBJECT, RDF_TYPE, ISSUED]

CLASSES = [URI(DC + "article"), URI(DC + "book"), URI(EX + "thesis")]
TOPICS = [URI(EX + "db"), URI(EX + "p2p")]
URIS = CLASSES + TOPICS
STRINGS = ["", "a", "b", "ab", "ba", "aab", "Nejdl", "W. Nejdl"]
NUMBERS: list[int | Fraction] = [-1, 0, 1, 2, 3, Fraction(1, 2), Fraction(5, 2)]
DATES = ["2003-12-31", "2004-01-01", "2004-06-15", "2005-01-01"]
SUBJECTS = [URI(EX + "doc1"), URI(EX + "doc2")]


def number_literal(value: int | Fraction) -> Literal:
    return number(value)


def date_literal(text: str) -> Literal:
    return Literal(text, XSD_DATE)


@st.composite
def object_values(draw: st.DrawFn, *, sparql_safe: bool = False) -> Literal | URI:
    kind = draw(st.sampled_from(["string", "number", "date", "uri"]))
    if kind == "string":
        text = draw(st.sampled_from([*STRINGS, "abab", "bb"]))
        if not sparql_safe and draw(st.booleans()):
            return Literal(text, None, "en")
        return Literal(text)
    if kind == "number":
        value = draw(st.sampled_from([*NUMBERS, -3, 5, Fraction(3, 2)]))
        if not sparql_safe and isinstance(value, int) and draw(st.booleans()):
            return Literal(f"{value}.0", XSD_DECIMAL)
        if isinstance(value, Fraction) and draw(st.booleans()):
            return Literal(repr(float(value)).replace("e", "E"), XSD_DOUBLE)
        return number_literal(value)
    if kind == "date":
        return date_literal(draw(st.sampled_from([*DATES, "2004-03-01"])))
    return draw(st.sampled_from([*URIS, URI(EX + "other")]))


@st.composite
def atoms_for(draw: st.DrawFn, variable: str) -> Atom:
    kind = draw(st.sampled_from(["string", "string", "number", "number", "date", "uri"]))
    if kind == "string":
        op = draw(st.sampled_from(["=", "contains", "contains"]))
        return Atom(variable, op, Literal(draw(st.sampled_from(STRINGS))))
    if kind == "uri":
        return Atom(variable, "=", draw(st.sampled_from(URIS)))
    op = draw(st.sampled_from(["=", "<", "<=", ">", ">="]))
    if kind == "number":
        return Atom(variable, op, number_literal(draw(st.sampled_from(NUMBERS))))
    return Atom(variable, op, date_literal(draw(st.sampled_from(DATES))))


@st.composite
def subscriptions(
    draw: st.DrawFn,
    *,
    max_patterns: int = 3,
    repeat_predicates: bool = False,
    max_disjuncts: int = 3,
    sparql_safe: bool = False,
) -> Subscription:
    """A satisfiable subscription; without ``repeat_predicates`` no predicate occurs twice."""
    count = draw(st.integers(1, max_patterns))
    if repeat_predicates:
        predicates = draw(st.lists(st.sampled_from(PREDICATES), min_size=count, max_size=count))
    else:
        predicates = draw(st.permutations(PREDICATES))[:count]
    patterns = []
    variables = []
    for index, predicate in enumerate(predicates):
        constant = draw(st.integers(0, 4)) == 0
        if constant:
            if predicate in (RDF_TYPE, SUBJECT):
                value: URI | Literal = draw(st.sampled_from(URIS))
            elif sparql_safe:
                value = Literal(draw(st.sampled_from(STRINGS)))
            else:
                value = draw(object_values())
            patterns.append(Pattern(predicate, value))
        else:
            name = f"v{index}"
            variables.append(name)
            patterns.append(Pattern(predicate, name))
    disjuncts = []
    if variables:
        for _ in range(draw(st.integers(1, max_disjuncts))):
            size = draw(st.integers(0, 3))
            disjuncts.append(
                tuple(draw(atoms_for(draw(st.sampled_from(variables)))) for _ in range(size))
            )
    else:
        disjuncts.append(())
    if draw(st.integers(0, 5)) == 0:
        disjuncts = [(*d, Atom("s", "=", draw(st.sampled_from(SUBJECTS)))) for d in disjuncts]
    answer = tuple(draw(st.lists(st.sampled_from(["s", *variables]), unique=True, max_size=2)))
    try:
        return Subscription("s", tuple(patterns), Constraint.of(disjuncts), answer)
    except QueryError:
        # Unsatisfiable draw: fall back to the same patterns without constraints.
        return Subscription("s", tuple(patterns), Constraint.of([()]), answer)


@st.composite
def publications(
    draw: st.DrawFn, *, sparql_safe: bool = False, max_triples: int = 5
) -> Publication:
    subject = draw(st.sampled_from(SUBJECTS))
    count = draw(st.integers(1, max_triples))
    statements = set()
    for _ in range(count):
        predicate = draw(st.sampled_from(PREDICATES))
        if predicate == RDF_TYPE and draw(st.booleans()):
            value: URI | Literal = draw(st.sampled_from(CLASSES))
        else:
            value = draw(object_values(sparql_safe=sparql_safe))
        statements.add((predicate, value))
    return Publication(subject, frozenset(statements), "peer", draw(st.text("xyz", max_size=3)))


@st.composite
def advertisements(draw: st.DrawFn) -> Advertisement:
    schemas = draw(
        st.lists(
            st.sampled_from([DC, EX, "http://www.w3.org/1999/02/22-rdf-syntax-ns#"]), max_size=2
        )
    )
    properties = draw(st.lists(st.sampled_from([*PREDICATES, *CLASSES]), max_size=3))
    values: dict[URI, list] = {}
    for predicate in draw(st.lists(st.sampled_from(PREDICATES), max_size=3, unique=True)):
        allowed = []
        for _ in range(draw(st.integers(1, 3))):
            choice = draw(st.integers(0, 3))
            if choice == 0:
                allowed.append(dom.point(Literal(draw(st.sampled_from(STRINGS)))))
            elif choice == 1:
                allowed.append(dom.point(draw(st.sampled_from(URIS))))
            elif choice == 2:
                low = draw(st.sampled_from([None, *NUMBERS]))
                high = draw(st.sampled_from([None, *NUMBERS]))
                if low is not None and high is not None and low > high:
                    low, high = high, low
                allowed.append(
                    dom.RangeDomain("number", low, low is not None, high, high is not None)
                )
            else:
                allowed.append(dom.point(number_literal(draw(st.sampled_from(NUMBERS)))))
        values[predicate] = allowed
    return Advertisement.build(schemas=schemas, properties=properties, values=values)


def universe(*subscriptions_: Subscription) -> dict[URI, list[Literal | URI]]:
    """Per predicate, candidate objects that reach every cell the subscriptions' constants cut out:
    the constants, points between and beyond them, infinities, witnesses of every combination of
    ``contains`` substrings, and one fresh term of each kind."""
    constants: dict[URI, set] = {p: set() for p in PREDICATES}
    substrings: dict[URI, set[str]] = {p: set() for p in PREDICATES}
    constrained: set[URI] = set()
    for subscription in subscriptions_:
        for compiled in subscription.filters:
            for predicate, domain in compiled.patterns:
                if not isinstance(domain, dom.AnyDomain):
                    constrained.add(predicate)
                if isinstance(domain, dom.PointDomain):
                    constants[predicate].add(domain.term)
                elif isinstance(domain, dom.ContainsDomain):
                    substrings[predicate].update(domain.substrings)
                elif isinstance(domain, dom.RangeDomain):
                    for bound in (domain.low, domain.high):
                        if bound is not None:
                            constants[predicate].add((domain.kind, bound))
    result: dict[URI, list[Literal | URI]] = {}
    for predicate in PREDICATES:
        if predicate not in constrained:
            result[predicate] = [URI(EX + "fresh")]
            continue
        values: set = {
            URI(EX + "fresh"),
            Literal("#"),
            number_literal(Fraction(1, 4)),
            date_literal("1999-01-01"),
        }
        numbers = set()
        dates = set()
        for item in constants[predicate]:
            if isinstance(item, tuple):
                (numbers if item[0] == "number" else dates).add(item[1])
            elif item.kind == "number":
                numbers.add(Fraction(item.value))
            elif item.kind == "date":
                dates.add(item.value)
            else:
                values.add(item)
        for points, make in ((numbers, number_literal), (dates, _instant)):
            ordered = sorted(points)
            for value in ordered:
                values.add(make(value))
            for low, high in itertools.pairwise(ordered):
                values.add(make(Fraction(low + high) / 2))
            if ordered:
                values.add(make(ordered[0] - 1))
                values.add(make(ordered[-1] + 1))
        values.add(Literal("INF", XSD_DOUBLE))
        values.add(Literal("-INF", XSD_DOUBLE))
        parts = sorted(substrings[predicate])
        for size in range(len(parts) + 1):
            for combination in itertools.combinations(parts, size):
                values.add(Literal("#" + "#".join(combination) + "#"))
        result[predicate] = sorted(values, key=repr)
    return result


def _instant(seconds: int | Fraction) -> Literal:
    return instant_literal(seconds)


def small_publications(
    subject_predicates: list[URI], choices: dict[URI, list]
) -> list[Publication]:
    """Every publication with exactly one object for each of the given predicates."""
    result = []
    for subject in [*SUBJECTS, URI(EX + "fresh-subject")]:
        for combination in itertools.product(*(choices[p] for p in subject_predicates)):
            statements = frozenset(zip(subject_predicates, combination, strict=True))
            result.append(Publication(subject, statements, "oracle", "o"))
    return result


SCHEMA_PROPERTIES = [CREATOR, TITLE, DATE, SUBJECT, ISSUED]


@st.composite
def schema_axioms(draw: st.DrawFn, *, max_axioms: int = 6) -> frozenset[Axiom]:
    """A small RDFS schema over the shared vocabulary: sub-class and sub-property chains (and
    cycles), domains and ranges, so that entailment reaches what subscriptions ask for."""
    axioms = set()
    for _ in range(draw(st.integers(1, max_axioms))):
        kind = draw(st.sampled_from([SUBCLASS, SUBCLASS, SUBPROPERTY, SUBPROPERTY, DOMAIN, RANGE]))
        if kind == SUBCLASS:
            subject, obj = draw(st.sampled_from(CLASSES)), draw(st.sampled_from(CLASSES))
        elif kind == SUBPROPERTY:
            subject = draw(st.sampled_from(SCHEMA_PROPERTIES))
            obj = draw(st.sampled_from(SCHEMA_PROPERTIES))
        else:
            subject, obj = draw(st.sampled_from(SCHEMA_PROPERTIES)), draw(st.sampled_from(CLASSES))
        axioms.add(Axiom(kind=kind, subject=subject, object=obj))
    return frozenset(axioms)


def schema_text(axioms: frozenset[Axiom]) -> str:
    """N-Triples of ``axioms`` (what a peer would publish), with a declaration mixed in."""
    lines = [
        f"<{a.subject.value}> <http://www.w3.org/2000/01/rdf-schema#{a.kind}> <{a.object.value}> ."
        for a in sorted(axioms, key=repr)
    ]
    lines.append(
        f"<{CLASSES[0].value}> <{RDF_TYPE.value}> <http://www.w3.org/2000/01/rdf-schema#Class> ."
    )
    return "\n".join(lines) + "\n"


@st.composite
def self_describing_publications(draw: st.DrawFn) -> Publication:
    """``publications()``, sometimes with a triple whose object is its own subject (the one
    case where a range says something about the publication's subject)."""
    publication = draw(publications())
    if draw(st.booleans()):
        return publication
    predicate = draw(st.sampled_from(SCHEMA_PROPERTIES))
    statements = publication.statements | {(predicate, publication.subject)}
    return Publication(publication.subject, statements, publication.publisher, publication.id)
