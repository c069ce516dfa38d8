"""Advertisements (Definitions 5-8): what a peer says it will publish.

An advertisement has three levels: schemas (namespaces), properties (a class name stands for
``rdf:type`` that class) and property/value sets (finite values and inclusive ranges). Its meaning is
the set of triples it *allows*, and routing only needs two questions about that set:
``advertisement_allows`` (may this peer publish this?) and ``advertisement_covers`` (could this peer
publish something that matches this subscription?). Both use one rule, so a publication that is allowed
and matches a subscription always meets an advertisement that covers the subscription: that is what
keeps routing complete.

The rule, for a triple (s, p, o) and one advertisement:

1. if the advertisement lists values for ``p``, ``o`` must be one of them (the most specific level
   wins: ``{"schemas": ["dc"], "values": {"dc:creator": ["Nejdl"]}}`` means Dublin Core, with Nejdl
   as the only creator);
2. otherwise, an advertisement with only property/value sets leaves the other properties open
   (Definition 8 constrains only the properties it names; this is what makes the paper's Example 5
   cover Example 1);
3. otherwise the triple's *item* (the class ``o`` for ``rdf:type``, else ``p``) must be listed at the
   property level, or lie in a listed schema; ``rdf:type`` itself at either level allows every class.

Super-peers do not keep advertisements whole: they keep and forward their *elements*, de-duplicated
across peers. ``elements()`` turns one advertisement into elements whose union means the same, even
mixed with other advertisements' elements: a broad element (schema, property, open) carries the set of
properties its own advertisement restricted by value, so that one peer's restriction never narrows
what another peer's broad element allows. The union of several advertisements' elements allows
exactly what at least one of them allows; covering over it is therefore sound for every peer behind a
super-peer, and monotone (if q' covers q and the elements cover q, they cover q').
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from qel import domains
from qel.domains import AnyDomain, ContainsDomain, Domain, PointDomain, RangeDomain
from qel.filters import Filter
from qel.model import Publication, Subscription
from qel.resources import DESCRIPTOR_PREDICATES
from qel.terms import (
    KIND_DATE,
    KIND_NUMBER,
    KIND_URI,
    RDF_TYPE,
    URI,
    Literal,
    Term,
    instant_literal,
    namespace,
    number,
)

ValueDomain = PointDomain | RangeDomain
RDF_NAMESPACE = namespace(RDF_TYPE)


@dataclass(frozen=True, slots=True)
class SchemaElement:
    """Allows every triple whose item lies in ``namespace``, except on the ``exclude`` properties."""

    namespace: str
    exclude: frozenset[URI] = frozenset()


@dataclass(frozen=True, slots=True)
class PropertyElement:
    """Allows every triple whose item is ``item``, except on the ``exclude`` properties."""

    item: URI
    exclude: frozenset[URI] = frozenset()


@dataclass(frozen=True, slots=True)
class ValueElement:
    """Allows the triples on ``property`` whose object lies in ``value`` (a point or a range)."""

    property: URI
    value: ValueDomain


@dataclass(frozen=True, slots=True)
class OpenElement:
    """Allows every triple except on the ``exclude`` properties (a property/value-only advertisement)."""

    exclude: frozenset[URI] = frozenset()


@dataclass(frozen=True, slots=True)
class BloomElement:
    """A summary of many fixed values of ``property`` (OntoNet's Bloom filters): allows the triples
    whose object's value the filter holds. False positives only: covering stays sound.

    ``kinds`` are the value kinds summarised, so a range or ``contains`` query can tell whether the
    summary may hold a value of its kind (it then answers "may overlap").
    """

    property: URI
    bits: bytes
    hashes: int
    kinds: frozenset[str]

    def holds(self, kind: str, value: object) -> bool:
        size = len(self.bits) * 8
        return all(
            self.bits[position // 8] & (1 << (position % 8))
            for position in _bloom_positions(kind, value, self.hashes, size)
        )


Element = SchemaElement | PropertyElement | ValueElement | OpenElement | BloomElement


def _bloom_key(kind: str, value: object) -> bytes:
    if kind in (KIND_NUMBER, KIND_DATE) and not (
        isinstance(value, float) and not math.isfinite(value)
    ):
        value = Fraction(value)  # type: ignore[arg-type]
    return f"{kind}\x00{value}".encode()


def _bloom_positions(kind: str, value: object, hashes: int, size: int) -> list[int]:
    digest = hashlib.blake2b(_bloom_key(kind, value), digest_size=16).digest()
    first, second = int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big") | 1
    return [(first + i * second) % size for i in range(hashes)]


def bloom_summary(
    prop: URI, points: Iterable[PointDomain | RangeDomain], *, false_positive_rate: float = 0.01
) -> BloomElement:
    """A Bloom filter over fixed values (points), sized for the requested false-positive rate."""
    keys = [(p.kind, p.value if isinstance(p, PointDomain) else p.low) for p in points]
    count = max(1, len(keys))
    size = max(64, math.ceil(-count * math.log(false_positive_rate) / math.log(2) ** 2))
    size = (size + 7) // 8 * 8
    hashes = max(1, round(size / count * math.log(2)))
    bits = bytearray(size // 8)
    for kind, value in keys:
        for position in _bloom_positions(kind, value, hashes, size):
            bits[position // 8] |= 1 << (position % 8)
    return BloomElement(prop, bytes(bits), hashes, frozenset(kind for kind, _ in keys))


def summarise(elements: Iterable[Element], max_values: int) -> frozenset[Element]:
    """Elements with large value sets replaced by summaries: per property, more than ``max_values``
    fixed numbers or dates become one covering range, more than ``max_values`` other fixed values
    (strings, URIs) one Bloom filter. Everything the input allows, the output allows."""
    kept: set[Element] = set()
    points: dict[tuple[URI, bool], list[PointDomain | RangeDomain]] = {}
    for element in elements:
        if isinstance(element, ValueElement) and (
            isinstance(element.value, PointDomain) or element.value.is_point
        ):
            ordered = element.value.kind in (KIND_NUMBER, KIND_DATE)
            points.setdefault((element.property, ordered), []).append(element.value)
        else:
            kept.add(element)
    for (prop, ordered), values in points.items():
        if len(values) <= max_values:
            kept.update(ValueElement(prop, v) for v in values)
        elif ordered:
            for kind in sorted({v.kind for v in values}):
                bounds = [v.low for v in values if v.kind == kind]  # type: ignore[union-attr]
                low, high = min(bounds), max(bounds)  # type: ignore[type-var]
                kept.add(ValueElement(prop, RangeDomain(kind, low, True, high, True)))
        else:
            kept.add(bloom_summary(prop, values))
    return frozenset(kept)


@dataclass(frozen=True, slots=True)
class Advertisement:
    """``schemas`` are namespace IRIs, ``properties`` URIs (properties or classes), ``values`` maps a
    property to its allowed values (points and inclusive ranges), kept sorted for stable equality."""

    schemas: frozenset[str] = frozenset()
    properties: frozenset[URI] = frozenset()
    values: tuple[tuple[URI, tuple[ValueDomain, ...]], ...] = ()
    elements: frozenset[Element] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        merged: dict[URI, set[ValueDomain]] = {}
        for prop, allowed in self.values:
            merged.setdefault(prop, set()).update(allowed)
        canonical = tuple(
            (prop, tuple(sorted(merged[prop], key=repr)))
            for prop in sorted(merged, key=lambda p: p.value)
        )
        object.__setattr__(self, "values", canonical)
        object.__setattr__(self, "elements", frozenset(_elements(self)))

    @classmethod
    def build(
        cls,
        *,
        schemas: Iterable[str] = (),
        properties: Iterable[URI] = (),
        values: Mapping[URI, Iterable[ValueDomain]] | None = None,
    ) -> Advertisement:
        return cls(
            frozenset(schemas),
            frozenset(properties),
            tuple((prop, tuple(allowed)) for prop, allowed in (values or {}).items()),
        )

    @property
    def restricted(self) -> frozenset[URI]:
        return frozenset(prop for prop, _ in self.values)

    def to_json(self) -> dict[str, object]:
        """The documented JSON shape, with full URIs (no prefixes needed to read it back)."""
        result: dict[str, object] = {}
        if self.schemas:
            result["schemas"] = sorted(self.schemas)
        if self.properties:
            result["properties"] = sorted(p.value for p in self.properties)
        if self.values:
            result["values"] = {
                prop.value: [_value_to_json(v) for v in allowed] for prop, allowed in self.values
            }
        return result

    def to_text(self) -> str:
        """Canonical JSON text; ``qel.parse_advertisement`` reads it back to an equal object."""
        return _dump_json(self.to_json())

    def __str__(self) -> str:
        return self.to_text()


def _elements(ad: Advertisement) -> list[Element]:
    restricted = ad.restricted
    found: list[Element] = [
        ValueElement(prop, value) for prop, allowed in ad.values for value in allowed
    ]
    for schema in ad.schemas:
        relevant = frozenset(p for p in restricted if namespace(p) == schema or p == RDF_TYPE)
        found.append(SchemaElement(schema, relevant))
    for item in ad.properties:
        # Excluding ``item`` itself still lets it allow ``rdf:type item`` (it may be a class).
        relevant = frozenset(p for p in restricted if p in (item, RDF_TYPE))
        found.append(PropertyElement(item, relevant))
    if not ad.schemas and not ad.properties and ad.values:
        found.append(OpenElement(restricted))
    return found


def element_allows_triple(element: Element, predicate: URI, obj: Term) -> bool:
    if predicate in DESCRIPTOR_PREDICATES:
        return True  # a resource's hash and size: see ``qel.resources``
    if isinstance(element, BloomElement):
        return element.property == predicate and element.holds(obj.kind, obj.value)
    if isinstance(element, ValueElement):
        return element.property == predicate and element.value.admits(obj.kind, obj.value)
    if predicate in element.exclude:
        return False
    if isinstance(element, OpenElement):
        return True
    item = obj if predicate == RDF_TYPE and isinstance(obj, URI) else predicate
    if isinstance(element, SchemaElement):
        return namespace(item) == element.namespace or (
            predicate == RDF_TYPE and element.namespace == RDF_NAMESPACE
        )
    return element.item == item or (predicate == RDF_TYPE and element.item == RDF_TYPE)


def element_overlaps(element: Element, predicate: URI, domain: Domain) -> bool:
    """Whether the element allows some triple on ``predicate`` whose object lies in ``domain``."""
    if isinstance(element, BloomElement):
        if element.property != predicate:
            return False
        if isinstance(domain, PointDomain):
            return element.holds(domain.kind, domain.value)
        if isinstance(domain, RangeDomain) and domain.is_point:
            return element.holds(domain.kind, domain.low)
        return isinstance(domain, AnyDomain) or domain_kind(domain) in element.kinds
    if isinstance(element, ValueElement):
        return element.property == predicate and domains.overlaps(element.value, domain)
    if predicate in element.exclude:
        return False
    if isinstance(element, OpenElement):
        return True
    if predicate != RDF_TYPE:
        if isinstance(element, SchemaElement):
            return namespace(predicate) == element.namespace
        return element.item == predicate
    # rdf:type: the item is the class, i.e. the object.
    if isinstance(element, SchemaElement):
        if element.namespace == RDF_NAMESPACE:
            return True
        if isinstance(domain, AnyDomain):
            return True
        return (
            isinstance(domain, PointDomain)
            and domain.kind == KIND_URI
            and namespace(domain.value) == element.namespace  # type: ignore[arg-type]
        )
    if element.item == RDF_TYPE or isinstance(domain, AnyDomain):
        return True
    return domain.admits(KIND_URI, element.item.value)


def domain_kind(domain: Domain) -> str | None:
    """The kind of term a constrained domain holds (None for ANY)."""
    if isinstance(domain, PointDomain | RangeDomain):
        return domain.kind
    if isinstance(domain, ContainsDomain):
        return "string"
    return None


def elements_cover_filter(elements: Iterable[Element], compiled: Filter) -> bool:
    pool = list(elements)
    return all(
        any(element_overlaps(element, predicate, domain) for element in pool)
        for predicate, domain in compiled.patterns
    )


def elements_cover(elements: Iterable[Element], subscription: Subscription) -> bool:
    pool = list(elements)
    return any(elements_cover_filter(pool, compiled) for compiled in subscription.filters)


def advertisement_covers(advertisement: Advertisement, subscription: Subscription) -> bool:
    """Whether the advertiser could publish something that matches the subscription.

    Exact for the allow rule in the module docstring, hence sound in the "may" direction, and monotone.
    """
    return elements_cover(advertisement.elements, subscription)


def advertisement_allows(advertisement: Advertisement, publication: Publication) -> bool:
    """Whether every triple of the publication is within the advertisement."""
    pool = advertisement.elements
    return all(
        any(element_allows_triple(element, predicate, obj) for element in pool)
        for predicate, obj in publication.statements
    )


def disallowed_triples(
    advertisement: Advertisement, publication: Publication
) -> list[tuple[URI, Term]]:
    """The (predicate, object) pairs the advertisement does not allow, for error messages."""
    pool = advertisement.elements
    return sorted(
        (
            (predicate, obj)
            for predicate, obj in publication.statements
            if not any(element_allows_triple(element, predicate, obj) for element in pool)
        ),
        key=repr,
    )


def _value_to_json(value: ValueDomain) -> object:
    if isinstance(value, PointDomain):
        term = value.term
        if isinstance(term, URI):
            return {"uri": term.value}
        if isinstance(term, Literal) and term.kind == "string":
            return term.lexical
        return {"literal": term.lexical, "datatype": term.datatype}  # type: ignore[union-attr]
    if value.is_point and value.kind == KIND_NUMBER:
        return _JsonNumber(value.low)  # type: ignore[arg-type]
    result: dict[str, object] = {}
    kind = "number" if value.kind == KIND_NUMBER else "dateTime"
    for name, bound in (("min", value.low), ("max", value.high)):
        if bound is None:
            continue
        if value.kind == KIND_NUMBER:
            result[name] = _JsonNumber(bound)
        else:
            result[name] = instant_literal(bound).lexical
    if value.kind == KIND_DATE or not result:
        result["type"] = kind
    return result


class _JsonNumber:
    """A number written exactly in JSON (a Fraction has no JSON form of its own)."""

    def __init__(self, value: int | Fraction) -> None:
        self.text = number(value).lexical


def _dump_json(value: object) -> str:
    if isinstance(value, _JsonNumber):
        return value.text
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(k)}: {_dump_json(v)}" for k, v in sorted(value.items()))
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dump_json(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)
