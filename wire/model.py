"""Plain (msgpack-ready) forms of the language's objects, and their validated inverses.

Subscriptions travel in their structured form, never as text: a super-peer rebuilds the
``qel.Subscription`` from patterns and atoms, which validates it again (a forged or corrupted
subscription is refused exactly like a user's query) without paying for a parser. Numbers that are
not integers travel as exact fraction strings (``"5/2"``), so nothing is rounded on the way.

Terms: ``["u", iri]`` or ``["l", lexical, datatype-or-nil, lang-or-nil]``.
"""

from __future__ import annotations

from fractions import Fraction

import qel
from qel import domains
from qel.advertisements import (
    BloomElement,
    Element,
    OpenElement,
    PropertyElement,
    SchemaElement,
    ValueElement,
)
from qel.axioms import Axiom
from qel.constraints import Atom, Constraint
from qel.terms import URI, Literal, Term


class ModelError(ValueError):
    """A plain value that does not describe a valid language object."""


def term_to_plain(term: Term) -> list[object]:
    if isinstance(term, URI):
        return ["u", term.value]
    return ["l", term.lexical, term.datatype, term.lang]


def term_from_plain(plain: object) -> Term:
    try:
        if isinstance(plain, list) and plain and plain[0] == "u" and len(plain) == 2:
            return URI(_text(plain[1]))
        if isinstance(plain, list) and len(plain) == 4 and plain[0] == "l":
            _, lexical, datatype, lang = plain
            return Literal(_text(lexical), _optional_text(datatype), _optional_text(lang))
    except (TypeError, ValueError) as error:
        raise ModelError(f"malformed term {plain!r}: {error}") from None
    raise ModelError(f"malformed term {plain!r}")


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ModelError(f"expected a string, got {type(value).__name__}")
    return value


def _optional_text(value: object) -> str | None:
    return None if value is None else _text(value)


def _number_to_plain(value: int | Fraction | None) -> object:
    if value is None or isinstance(value, int):
        return value if value is None or -(2**63) <= value < 2**63 else str(value)
    return str(value)


def _number_from_plain(value: object) -> int | Fraction | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str) and len(value) <= 200:
        try:
            exact = Fraction(value)
        except (ValueError, ZeroDivisionError):
            raise ModelError(f"malformed number {value!r}") from None
        return exact.numerator if exact.denominator == 1 else exact
    raise ModelError(f"malformed number {value!r}")


# -- subscriptions ----------------------------------------------------------------------------


def subscription_to_plain(subscription: qel.Subscription) -> dict[str, object]:
    return {
        "subject": subscription.subject,
        "answer": list(subscription.answer),
        "patterns": [
            [
                p.predicate.value,
                p.object if isinstance(p.object, str) else term_to_plain(p.object),
            ]
            for p in subscription.patterns
        ],
        "constraint": [
            [[a.variable, a.op, term_to_plain(a.value)] for a in conjunction]
            for conjunction in subscription.constraint.disjuncts
        ],
    }


def subscription_from_plain(plain: object) -> qel.Subscription:
    if not isinstance(plain, dict) or set(plain) != {"subject", "answer", "patterns", "constraint"}:
        raise ModelError("a subscription has exactly: subject, answer, patterns, constraint")
    try:
        patterns = []
        for entry in _list(plain["patterns"]):
            predicate, obj = _pair(entry)
            patterns.append(
                qel.Pattern(
                    URI(_text(predicate)), obj if isinstance(obj, str) else term_from_plain(obj)
                )
            )
        disjuncts = []
        for conjunction in _list(plain["constraint"]):
            atoms = []
            for atom in _list(conjunction):
                if not isinstance(atom, list) or len(atom) != 3:
                    raise ModelError(f"malformed atom {atom!r}")
                variable, op, value = atom
                atoms.append(Atom(_text(variable), _text(op), term_from_plain(value)))
            disjuncts.append(tuple(atoms))
        if not disjuncts:
            raise ModelError("a subscription's constraint has at least one conjunction")
        answer = tuple(_text(v) for v in _list(plain["answer"]))
        return qel.Subscription(
            _text(plain["subject"]), tuple(patterns), Constraint(tuple(disjuncts)), answer
        )
    except qel.QueryError as error:
        raise ModelError(f"invalid subscription: {error}") from None
    except (TypeError, ValueError) as error:
        if isinstance(error, ModelError):
            raise
        raise ModelError(f"invalid subscription: {error}") from None


def _list(value: object) -> list:
    if not isinstance(value, list):
        raise ModelError(f"expected a list, got {type(value).__name__}")
    return value


def _pair(value: object) -> tuple[object, object]:
    if not isinstance(value, list) or len(value) != 2:
        raise ModelError(f"expected a pair, got {value!r}")
    return value[0], value[1]


# -- publications -----------------------------------------------------------------------------


def publication_to_plain(publication: qel.Publication) -> dict[str, object]:
    return {
        "subject": publication.subject.value,
        "statements": sorted(
            ([p.value, term_to_plain(o)] for p, o in publication.statements), key=_statement_order
        ),
        "publisher": publication.publisher,
        "id": publication.id,
    }


def _statement_order(statement: list) -> tuple:
    """A total order of a publication's statements in plain form, so that equal publications
    encode to equal bytes: the fields themselves (a ``repr`` of each statement, as this was,
    copied a statement's text, a kilobyte for a long literal, to compare it)."""
    predicate, term = statement
    if term[0] == "u":
        return predicate, "u", term[1], False, "", False, ""
    _, lexical, datatype, lang = term
    return predicate, "l", lexical, datatype is None, datatype or "", lang is None, lang or ""


def publication_from_plain(plain: object) -> qel.Publication:
    if not isinstance(plain, dict) or set(plain) != {"subject", "statements", "publisher", "id"}:
        raise ModelError("a publication has exactly: subject, statements, publisher, id")
    try:
        statements = set()
        for entry in _list(plain["statements"]):
            predicate, obj = _pair(entry)
            statements.add((URI(_text(predicate)), term_from_plain(obj)))
        return qel.Publication(
            URI(_text(plain["subject"])),
            frozenset(statements),
            _text(plain["publisher"]),
            _text(plain["id"]),
        )
    except qel.PublicationError as error:
        raise ModelError(f"invalid publication: {error}") from None
    except (TypeError, ValueError) as error:
        if isinstance(error, ModelError):
            raise
        raise ModelError(f"invalid publication: {error}") from None


# -- advertisements ---------------------------------------------------------------------------


def _domain_to_plain(domain: domains.PointDomain | domains.RangeDomain) -> list[object]:
    if isinstance(domain, domains.PointDomain):
        return ["point", term_to_plain(domain.term)]
    return [
        "range",
        domain.kind,
        _number_to_plain(domain.low),
        domain.low_inclusive,
        _number_to_plain(domain.high),
        domain.high_inclusive,
    ]


def _domain_from_plain(plain: object) -> domains.PointDomain | domains.RangeDomain:
    if isinstance(plain, list) and len(plain) == 2 and plain[0] == "point":
        try:
            return domains.point(term_from_plain(plain[1]))  # type: ignore[return-value]
        except ValueError as error:
            raise ModelError(f"malformed value {plain!r}: {error}") from None
    if isinstance(plain, list) and len(plain) == 6 and plain[0] == "range":
        _, kind, low, low_inclusive, high, high_inclusive = plain
        if kind not in ("number", "date") or not isinstance(low_inclusive, bool):
            raise ModelError(f"malformed range {plain!r}")
        if not isinstance(high_inclusive, bool):
            raise ModelError(f"malformed range {plain!r}")
        result = domains.RangeDomain(
            kind, _number_from_plain(low), low_inclusive, _number_from_plain(high), high_inclusive
        )
        if not domains.range_is_satisfiable(result):
            raise ModelError(f"empty range {plain!r}")
        return result
    raise ModelError(f"malformed value {plain!r}")


def _uris(plain: object) -> frozenset[URI]:
    return frozenset(URI(_text(v)) for v in _list(plain))


def element_to_plain(element: Element) -> list[object]:
    if isinstance(element, SchemaElement):
        return ["schema", element.namespace, sorted(u.value for u in element.exclude)]
    if isinstance(element, PropertyElement):
        return ["property", element.item.value, sorted(u.value for u in element.exclude)]
    if isinstance(element, OpenElement):
        return ["open", sorted(u.value for u in element.exclude)]
    if isinstance(element, ValueElement):
        return ["value", element.property.value, _domain_to_plain(element.value)]
    return [
        "bloom",
        element.property.value,
        element.bits,
        element.hashes,
        sorted(element.kinds),
    ]


def element_from_plain(plain: object) -> Element:
    try:
        if not isinstance(plain, list) or not plain:
            raise ModelError(f"malformed advertisement element {plain!r}")
        kind = plain[0]
        if kind == "schema" and len(plain) == 3:
            return SchemaElement(_text(plain[1]), _uris(plain[2]))
        if kind == "property" and len(plain) == 3:
            return PropertyElement(URI(_text(plain[1])), _uris(plain[2]))
        if kind == "open" and len(plain) == 2:
            return OpenElement(_uris(plain[1]))
        if kind == "value" and len(plain) == 3:
            return ValueElement(URI(_text(plain[1])), _domain_from_plain(plain[2]))
        if kind == "bloom" and len(plain) == 5:
            _, prop, bits, hashes, kinds = plain
            if not isinstance(bits, bytes) or not bits or not isinstance(hashes, int):
                raise ModelError("a Bloom element needs bits (bytes) and a hash count")
            if not 1 <= hashes <= 64:
                raise ModelError(f"a Bloom element's hash count must be 1..64, got {hashes}")
            return BloomElement(
                URI(_text(prop)), bits, hashes, frozenset(_text(k) for k in _list(kinds))
            )
    except (TypeError, ValueError) as error:
        if isinstance(error, ModelError):
            raise
        raise ModelError(f"malformed advertisement element {plain!r}: {error}") from None
    raise ModelError(f"malformed advertisement element {plain!r}")


def advertisement_to_plain(advertisement: qel.Advertisement) -> dict[str, object]:
    return {
        "schemas": sorted(advertisement.schemas),
        "properties": sorted(p.value for p in advertisement.properties),
        "values": [
            [prop.value, [_domain_to_plain(v) for v in allowed]]
            for prop, allowed in advertisement.values
        ],
    }


def advertisement_from_plain(plain: object) -> qel.Advertisement:
    if not isinstance(plain, dict) or set(plain) != {"schemas", "properties", "values"}:
        raise ModelError("an advertisement has exactly: schemas, properties, values")
    try:
        values = {}
        for entry in _list(plain["values"]):
            prop, allowed = _pair(entry)
            values[URI(_text(prop))] = [_domain_from_plain(v) for v in _list(allowed)]
        return qel.Advertisement.build(
            schemas=[_text(s) for s in _list(plain["schemas"])],
            properties=[URI(_text(p)) for p in _list(plain["properties"])],
            values=values,
        )
    except (TypeError, ValueError) as error:
        if isinstance(error, ModelError):
            raise
        raise ModelError(f"invalid advertisement: {error}") from None


# -- schemas ----------------------------------------------------------------------------------


def axiom_to_plain(axiom: Axiom) -> list[object]:
    return [axiom.kind, axiom.subject.value, axiom.object.value]


def axiom_from_plain(plain: object) -> Axiom:
    if not isinstance(plain, list) or len(plain) != 3:
        raise ModelError(f"malformed axiom {plain!r}")
    kind, subject, obj = plain
    try:
        return Axiom(kind=_text(kind), subject=URI(_text(subject)), object=URI(_text(obj)))
    except ValueError as error:  # qel.SchemaError included
        if isinstance(error, ModelError):
            raise
        raise ModelError(f"invalid axiom: {error}") from None
