"""RDFS entailment before matching (seed 000): a publication's closure under a schema, and the
closure of advertisement elements that keeps routing complete under it.

A publication is one subject's triples, so the closure needed is the part of the RDFS closure
about that subject. It follows from four RDFS rules, each with one data premise:

* rdfs7 (``p subPropertyOf q``): ``s p o`` gives ``s q o``;
* rdfs9 (``C subClassOf D``): ``s rdf:type C`` gives ``s rdf:type D``;
* rdfs2 (``p domain C``): ``s p o`` gives ``s rdf:type C``;
* rdfs3 (``p range C``): ``s p o`` gives ``o rdf:type C``, a triple about the publication's
  subject only when ``o`` is ``s``;

with subPropertyOf and subClassOf transitive (rdfs5, rdfs11). The other RDFS rules say that
everything is a ``rdfs:Resource``, that a class is a class, and so on: true of every publication,
they distinguish none, and are left out (a subscription on ``rdf:type rdfs:Resource`` matches
only what says so). Because every rule has one data premise, the closure of a publication is the
union of its triples' closures, and ``Schema`` precomputes, per property and per class, what one
triple entails: entailment costs a dictionary look-up per triple.

Routing completeness needs the same closure on the advertisement side: a peer that advertises
``ex:Article`` will publish, in effect, ``rdf:type ex:Document`` too, so a subscription on
documents must travel toward it. ``Schema.close`` adds to a set of elements what the closure of
every triple they allow needs; the origin announces its elements closed under the schema it
entails publications with, so the two always agree (``superpeer.schemas``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Final

from qel import domains
from qel.advertisements import (
    RDF_NAMESPACE,
    BloomElement,
    Element,
    OpenElement,
    PropertyElement,
    SchemaElement,
    ValueElement,
)
from qel.axioms import DOMAIN, RANGE, SUBCLASS, SUBPROPERTY, Axiom
from qel.model import Publication
from qel.terms import KIND_URI, RDF_TYPE, URI, Term, namespace


def _upward(edges: Mapping[URI, set[URI]], start: URI) -> frozenset[URI]:
    """Everything above ``start`` along ``edges`` (cycles allowed), ``start`` left out."""
    found: set[URI] = set()
    stack = list(edges.get(start, ()))
    while stack:
        item = stack.pop()
        if item in found:
            continue
        found.add(item)
        stack.extend(edges.get(item, ()))
    found.discard(start)
    return frozenset(found)


class Schema:
    """A set of axioms, with what each property and class entails precomputed."""

    def __init__(self, axioms: Iterable[Axiom] = ()) -> None:
        self.axioms: frozenset[Axiom] = frozenset(axioms)
        by_kind: dict[str, dict[URI, set[URI]]] = {kind: {} for kind in (SUBCLASS, SUBPROPERTY)}
        by_kind[DOMAIN], by_kind[RANGE] = {}, {}
        for axiom in self.axioms:
            by_kind[axiom.kind].setdefault(axiom.subject, set()).add(axiom.object)
        sub_classes, sub_properties = by_kind[SUBCLASS], by_kind[SUBPROPERTY]
        self.classes: dict[URI, frozenset[URI]] = {c: _upward(sub_classes, c) for c in sub_classes}
        """Per class with a super-class, every class above it."""
        properties = set(sub_properties) | set(by_kind[DOMAIN]) | set(by_kind[RANGE])
        self.super_properties: dict[URI, frozenset[URI]] = {}
        """Per property with consequences, every property above it."""
        self.domain_types: dict[URI, frozenset[URI]] = {}
        """Per property, the types its subject gets (its and its super-properties' domains,
        and every class above them)."""
        self.range_types: dict[URI, frozenset[URI]] = {}
        """Per property, the types its object gets (entailed only when the object is the
        publication's subject)."""
        for prop in properties:
            above = _upward(sub_properties, prop)
            self.super_properties[prop] = above
            for kind, table in ((DOMAIN, self.domain_types), (RANGE, self.range_types)):
                direct = {c for p in (prop, *above) for c in by_kind[kind].get(p, ())}
                table[prop] = frozenset(direct.union(*(self.classes.get(c, ()) for c in direct)))

    def __bool__(self) -> bool:
        return bool(self.axioms)

    def entail(self, publication: Publication) -> Publication:
        """The publication with everything the schema entails about its subject."""
        if not self.axioms:
            return publication
        subject = publication.subject
        entailed: set[tuple[URI, Term]] = set(publication.statements)
        types: set[URI] = set()
        for predicate, obj in publication.statements:
            for above in self.super_properties.get(predicate, ()):
                entailed.add((above, obj))
            types.update(self.domain_types.get(predicate, ()))
            if obj == subject:
                types.update(self.range_types.get(predicate, ()))
            if predicate == RDF_TYPE and isinstance(obj, URI):
                types.update(self.classes.get(obj, ()))
        entailed.update((RDF_TYPE, c) for c in types)
        if len(entailed) == len(publication.statements):
            return publication
        return Publication(subject, frozenset(entailed), publication.publisher, publication.id)

    def close(self, elements: Iterable[Element]) -> frozenset[Element]:
        """``elements`` and what the closure of every triple they allow needs (an
        over-approximation where an element's exact closure has no element to say it: routing
        stays complete, at worst a subscription travels where nothing will match)."""
        given = frozenset(elements)
        if not self.axioms:
            return given
        added: set[Element] = set()
        for element in given:
            added.update(self._consequences(element))
        return given | added

    def _consequences(self, element: Element) -> Iterable[Element]:
        if isinstance(element, ValueElement | BloomElement):
            prop = element.property
            for above in self.super_properties.get(prop, ()):
                yield dataclasses.replace(element, property=above)
            yield from self._property_types(prop)
            if prop == RDF_TYPE:
                for cls in self.classes:
                    if _holds_class(element, cls):
                        yield from self._class_types(cls)
            return
        exclude = element.exclude
        types_open = RDF_TYPE not in exclude
        if isinstance(element, PropertyElement):
            if element.item not in exclude:
                yield from self._property_elements(element.item)
            if types_open:
                yield from self._class_types(element.item)
            if element.item == RDF_TYPE and types_open:
                for cls in self.classes:
                    yield from self._class_types(cls)
            return
        for prop in self.super_properties:
            if prop not in exclude and _in_scope(element, prop):
                yield from self._property_elements(prop)
        if types_open:
            for cls in self.classes:
                if _in_scope(element, cls) or (
                    isinstance(element, SchemaElement) and element.namespace == RDF_NAMESPACE
                ):
                    yield from self._class_types(cls)

    def _property_elements(self, prop: URI) -> Iterable[Element]:
        for above in self.super_properties.get(prop, ()):
            yield PropertyElement(above)
        yield from self._property_types(prop)

    def _property_types(self, prop: URI) -> Iterable[Element]:
        for cls in self.domain_types.get(prop, frozenset()) | self.range_types.get(
            prop, frozenset()
        ):
            yield _type_value(cls)

    def _class_types(self, cls: URI) -> Iterable[Element]:
        for above in self.classes.get(cls, ()):
            yield _type_value(above)


EMPTY: Final = Schema()


def _type_value(cls: URI) -> ValueElement:
    return ValueElement(RDF_TYPE, domains.point(cls))  # type: ignore[arg-type]


def _holds_class(element: ValueElement | BloomElement, cls: URI) -> bool:
    if isinstance(element, BloomElement):
        return element.holds(KIND_URI, cls.value)
    return element.value.admits(KIND_URI, cls.value)


def _in_scope(element: SchemaElement | OpenElement, item: URI) -> bool:
    """Whether a schema or open element allows ``item`` as a triple's item."""
    return isinstance(element, OpenElement) or namespace(item) == element.namespace
