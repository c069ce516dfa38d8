"""Advertisement routing indices (design paper Section 4.1, Figure 4), SP/P and SP/SP alike.

A super-peer keeps, per *origin* (itself for its own peers, or another super-peer whose
advertisements reached it), the advertisement elements that origin stands for, and per element the
*holders* behind it with a reference count: local peer ids at the origin itself (SP/P), the origin
id for a remote origin (SP/SP, whose own refcounts live at that origin). An element is new for an
origin when its first holder adds it and gone when its last holder removes it: exactly the moments
the origin must broadcast an addition or a withdrawal, so a peer's leaving withdraws only what no
other peer behind the origin still advertises.

``covering_origins(q)`` answers "toward which origins must ``q`` travel" with the exact semantics of
``qel.elements_cover`` (see ``qel.advertisements``): an origin covers ``q`` when, for some
alternative (filter) of ``q``, every pattern can be satisfied by a triple some element allows. The
three levels of the paper are the three ways an element can allow a triple: property/value elements
by value (hash look-up for fixed values, a scan of the ranges and strings of that property only),
property and schema elements by name. Per pattern the index yields the set of origins that can
satisfy it, and the sets are intersected, smallest first, so the cost depends on the patterns and
the origins that advertise their properties, not on every origin.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import qel
from qel.advertisements import (
    RDF_NAMESPACE,
    BloomElement,
    Element,
    OpenElement,
    PropertyElement,
    SchemaElement,
    ValueElement,
    element_overlaps,
)
from qel.domains import AnyDomain, Domain, PointDomain, RangeDomain
from qel.terms import KIND_URI, RDF_TYPE, URI, namespace


@dataclass
class _Broad:
    """Schema, property and open elements: name -> origin -> the exclude sets it was sent with."""

    schemas: dict[str, dict[str, frozenset[frozenset[URI]]]] = field(default_factory=dict)
    properties: dict[URI, dict[str, frozenset[frozenset[URI]]]] = field(default_factory=dict)
    open: dict[str, frozenset[frozenset[URI]]] = field(default_factory=dict)


@dataclass
class _Values:
    """Property/value elements of one property: fixed values hashed, the rest listed."""

    points: dict[tuple[str, object], frozenset[str]] = field(default_factory=dict)
    others: dict[Element, frozenset[str]] = field(default_factory=dict)
    origins: dict[str, int] = field(default_factory=dict)


_SHARED: dict[frozenset, frozenset] = {}
_SHARED_AT_MOST = 100_000


def _shared(items: frozenset) -> frozenset:
    """One object per distinct set, for every index that holds it: every super-peer indexes
    every origin's elements, each held by that origin alone, and the exclude sets and origins
    per name or value are the same everywhere once the advertisements have spread (a small set
    is some 200 bytes, per element, origin and super-peer). The sets are replaced, never
    changed. Bounded: past it a set is simply not shared."""
    if len(_SHARED) >= _SHARED_AT_MOST:
        return _SHARED.get(items, items)
    return _SHARED.setdefault(items, items)


def _with(items: frozenset | None, item: object) -> frozenset:
    return _shared(frozenset((item,)) if items is None else items | {item})


def _replace_without(table: dict, key: object, item: object) -> None:
    """``table[key]`` without ``item``; the key goes when nothing is left."""
    rest = table[key] - {item}
    if rest:
        table[key] = _shared(rest)
    else:
        del table[key]


def _not_excluded(by_origin: dict[str, frozenset[frozenset[URI]]], predicate: URI) -> set[str]:
    return {
        origin
        for origin, excludes in by_origin.items()
        if any(predicate not in exclude for exclude in excludes)
    }


class AdvertisementIndex:
    """Elements per origin with per-holder reference counts, and the covering look-up."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[Element, frozenset[str]]] = {}
        """Per origin, per element, its holders: replaced, not changed, so that the usual one,
        a remote origin holding its own element, is one shared set (``_shared``)."""
        self._broad = _Broad()
        self._values: dict[URI, _Values] = {}
        self.generation = 0
        """Counts the changes of the index: a covering look-up remembered at one generation
        holds until the next."""

    # -- updates ------------------------------------------------------------------------------
    def add(self, origin: str, holder: str, elements: Iterable[Element]) -> list[Element]:
        """Records that ``holder`` (behind ``origin``) advertises ``elements``; returns the elements
        the origin did not stand for before (those to broadcast), in a stable order."""
        elements = list(elements)
        if not elements:
            return []  # an origin with nothing is not an origin
        counts = self._counts.setdefault(origin, {})
        fresh = []
        for element in elements:
            holders = counts.get(element)
            if holders is None:
                fresh.append(element)
                self._index(origin, element)
                counts[element] = _with(None, holder)
            elif holder not in holders:
                counts[element] = _with(holders, holder)
        return sorted(fresh, key=repr)

    def remove(self, origin: str, holder: str, elements: Iterable[Element]) -> list[Element]:
        """Drops ``holder``'s claim on ``elements``; returns those the origin no longer stands for
        (those to withdraw network-wide)."""
        counts = self._counts.get(origin, {})
        gone = []
        for element in elements:
            holders = counts.get(element)
            if holders is None or holder not in holders:
                continue
            if len(holders) > 1:
                counts[element] = _shared(holders - {holder})
            else:
                del counts[element]
                self._unindex(origin, element)
                gone.append(element)
        if origin in self._counts and not counts:
            del self._counts[origin]
        return sorted(gone, key=repr)

    def remove_holder(self, origin: str, holder: str) -> list[Element]:
        """Drops every claim of ``holder`` (a peer that left for good)."""
        return self.remove(origin, holder, self.elements_of(origin, holder))

    # -- queries ------------------------------------------------------------------------------
    def origins(self) -> list[str]:
        return sorted(self._counts)

    def elements(self, origin: str) -> frozenset[Element]:
        return frozenset(self._counts.get(origin, {}))

    def elements_of(self, origin: str, holder: str) -> frozenset[Element]:
        return frozenset(e for e, hs in self._counts.get(origin, {}).items() if holder in hs)

    def holders(self, origin: str) -> frozenset[str]:
        return frozenset(h for hs in self._counts.get(origin, {}).values() for h in hs)

    def covers(self, origin: str, subscription: qel.Subscription) -> bool:
        """Whether ``origin``'s elements cover ``subscription`` (``qel.elements_cover``)."""
        return qel.elements_cover(self._counts.get(origin, {}), subscription)

    def covering_origins(self, subscription: qel.Subscription) -> set[str]:
        """The origins whose elements cover ``subscription``."""
        found: set[str] = set()
        for compiled in subscription.filters:
            per_pattern = sorted(
                (self._pattern_origins(p, d) for p, d in compiled.patterns), key=len
            )
            common = set(per_pattern[0])
            for origins in per_pattern[1:]:
                if not common:
                    break
                common &= origins
            found |= common
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.origins())

    def element_count(self) -> int:
        return sum(len(c) for c in self._counts.values())

    # -- the inverted index ---------------------------------------------------------------------
    def _pattern_origins(self, predicate: URI, domain: Domain) -> set[str]:
        found = _not_excluded(self._broad.open, predicate)
        if predicate != RDF_TYPE:
            found |= _not_excluded(self._broad.schemas.get(namespace(predicate), {}), predicate)
            found |= _not_excluded(self._broad.properties.get(predicate, {}), predicate)
        else:
            found |= self._type_origins(domain)
        values = self._values.get(predicate)
        if values is not None:
            found |= self._value_origins(values, predicate, domain)
        return found

    def _type_origins(self, domain: Domain) -> set[str]:
        """Broad elements that allow an ``rdf:type`` triple whose class lies in ``domain``."""
        found = _not_excluded(self._broad.schemas.get(RDF_NAMESPACE, {}), RDF_TYPE)
        found |= _not_excluded(self._broad.properties.get(RDF_TYPE, {}), RDF_TYPE)
        if isinstance(domain, AnyDomain):
            for by_origin in (*self._broad.schemas.values(), *self._broad.properties.values()):
                found |= _not_excluded(by_origin, RDF_TYPE)
        elif isinstance(domain, PointDomain) and domain.kind == KIND_URI:
            cls = domain.term
            found |= _not_excluded(self._broad.schemas.get(namespace(cls), {}), RDF_TYPE)  # type: ignore[arg-type]
            found |= _not_excluded(self._broad.properties.get(cls, {}), RDF_TYPE)  # type: ignore[arg-type]
        return found

    @staticmethod
    def _value_origins(values: _Values, predicate: URI, domain: Domain) -> set[str]:
        if isinstance(domain, AnyDomain):
            return set(values.origins)
        found: set[str] = set()
        if isinstance(domain, PointDomain):
            found |= values.points.get((domain.kind, domain.value), set())
        elif isinstance(domain, RangeDomain) and domain.is_point:
            found |= values.points.get((domain.kind, domain.low), set())
        else:
            for (kind, value), origins in values.points.items():
                if not origins <= found and domain.admits(kind, value):
                    found |= origins
        for element, origins in values.others.items():
            if not origins <= found and element_overlaps(element, predicate, domain):
                found |= origins
        return found

    def _index(self, origin: str, element: Element) -> None:
        self.generation += 1
        if isinstance(element, SchemaElement | PropertyElement):
            table = (
                self._broad.schemas.setdefault(element.namespace, {})
                if isinstance(element, SchemaElement)
                else self._broad.properties.setdefault(element.item, {})
            )
            table[origin] = _with(table.get(origin), element.exclude)
        elif isinstance(element, OpenElement):
            self._broad.open[origin] = _with(self._broad.open.get(origin), element.exclude)
        else:
            values = self._values.setdefault(element.property, _Values())
            values.origins[origin] = values.origins.get(origin, 0) + 1
            key = _point_key(element)
            if key is not None:
                values.points[key] = _with(values.points.get(key), origin)
            else:
                values.others[element] = _with(values.others.get(element), origin)

    def _unindex(self, origin: str, element: Element) -> None:
        self.generation += 1
        if isinstance(element, SchemaElement | PropertyElement):
            table = (
                self._broad.schemas
                if isinstance(element, SchemaElement)
                else self._broad.properties
            )
            name = element.namespace if isinstance(element, SchemaElement) else element.item
            _discard_nested(table, name, origin, element.exclude)
        elif isinstance(element, OpenElement):
            _replace_without(self._broad.open, origin, element.exclude)
        else:
            values = self._values[element.property]
            values.origins[origin] -= 1
            if not values.origins[origin]:
                del values.origins[origin]
            key = _point_key(element)
            table = values.points if key is not None else values.others
            entry = key if key is not None else element
            _replace_without(table, entry, origin)
            if not values.origins:
                del self._values[element.property]


def _point_key(element: ValueElement | BloomElement) -> tuple[str, object] | None:
    if isinstance(element, BloomElement):
        return None
    value = element.value
    if isinstance(value, PointDomain):
        return (value.kind, value.value)
    if value.is_point:
        return (value.kind, value.low)
    return None


def _discard_nested(table: dict, name: object, origin: str, exclude: frozenset[URI]) -> None:
    by_origin = table[name]
    _replace_without(by_origin, origin, exclude)
    if not by_origin:
        del table[name]
