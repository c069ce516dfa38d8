"""What the poset keeps of a subscription's witness (``qel.filters.witness``): a publication
that its first filter matches, and that every subscription covering it therefore matches too.
The sent index and the plans ask their predicate indexes with it for the subscriptions that may
cover a node (``poset.sent_index``, ``poset.plans``); one is kept per node, so its size is paid
per subscription."""

from __future__ import annotations

from qel.model import Publication
from qel.terms import KIND_DATE, KIND_NUMBER, URI


class Sample:
    """What the poset keeps of a witness: its subject and its objects by predicate, which is all
    that matching it (``qel.matching.filter_matches``, ``PredicateIndex.match``) reads; the
    publication's statements and terms took as much again. The objects of a predicate that are
    neither numbers nor dates are kept once for all samples (``_shared_objects``). The pairs
    are a flat tuple, made a dictionary when read: a dictionary kept per sample took 214 bytes
    per subscription on listings (a tuple of three predicates' pairs, 88), and a sample is read
    a few times per look-up, where making the dictionary costs about a microsecond."""

    __slots__ = ("_pairs", "subject")

    def __init__(self, publication: Publication) -> None:
        self.subject = publication.subject
        self._pairs = tuple(
            part
            for predicate, objects in publication.values.items()
            for part in (predicate, _shared_objects(objects))
        )

    @property
    def values(self) -> dict[URI, tuple[tuple[str, object], ...]]:
        """Predicate -> its objects, ``((kind, value), ...)``, as a publication's ``values``."""
        pairs = self._pairs
        return dict(zip(pairs[::2], pairs[1::2], strict=True))


SHARED_OBJECTS_KEPT = 16_384
"""Most distinct witness objects of one predicate kept once each (``_SHARED_OBJECTS``)."""

_SHARED_OBJECTS: dict[tuple[tuple[str, object], ...], tuple[tuple[str, object], ...]] = {}
"""A sample's objects on one predicate, ``((kind, value), ...)``, once each when none is a
number or a date: a class, a maker, a fuel, a ``contains`` witness, the fresh URI of an
unconstrained object recur in thousands of subscriptions' witnesses (on shapes at 10^4, 3.4
such tuples per sample, each with its pairs, some 300 bytes per subscription), while a range's
middle is a value of its own (not kept: it would fill the table). Bounded: past
``SHARED_OBJECTS_KEPT`` a new tuple is simply not shared; nothing depends on it but memory."""

_UNSHARED_KINDS = frozenset((KIND_NUMBER, KIND_DATE))


def _shared_objects(objects: tuple[tuple[str, object], ...]) -> tuple[tuple[str, object], ...]:
    kept = _SHARED_OBJECTS.get(objects)
    if kept is not None:
        return kept
    if len(_SHARED_OBJECTS) >= SHARED_OBJECTS_KEPT or any(
        kind in _UNSHARED_KINDS for kind, _ in objects
    ):
        return objects
    _SHARED_OBJECTS[objects] = objects
    return objects
