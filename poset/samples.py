"""What the poset keeps of a subscription's witness (``qel.filters.witness``): a publication
that its first filter matches, and that every subscription covering it therefore matches too.
The sent index and the plans ask their predicate indexes with it for the subscriptions that may
cover a node (``poset.sent_index``, ``poset.plans``); one is kept per node, so its size is paid
per subscription.

A node keeps its witness as one flat tuple (``compact``), and a ``Sample`` is made from it when
a look-up reads it (about 1.5 microseconds, once or twice per look-up). The publication's
statements and terms took as much again as its objects by predicate; those objects, a tuple per
predicate and a pair per object, took 110 bytes per number or date (on shapes at 3 x 10^4, the
witness 320 bytes per subscription with the sample object and its entry in a dictionary by node
id; the flat tuple, in the node, about 110). String values are interned: a class, a maker, a
``contains`` witness recur in thousands of witnesses, each an object of its own when made."""

from __future__ import annotations

import sys

from qel.model import Publication
from qel.terms import URI

Compact = tuple[object, ...]
"""A witness as a node keeps it: its subject, then ``predicate, kind, value`` per object."""


def compact(publication: Publication) -> Compact:
    """The witness ``publication`` as a node keeps it (module docstring)."""
    parts: list[object] = [publication.subject]
    for predicate, objects in publication.values.items():
        for kind, value in objects:
            parts += (predicate, kind, sys.intern(value) if type(value) is str else value)
    return tuple(parts)


class Sample:
    """A witness as matching reads it (``qel.matching.filter_matches``, ``PredicateIndex.match``):
    its subject and its objects by predicate, made from what a node keeps (``compact``)."""

    __slots__ = ("subject", "values")

    def __init__(self, kept: Compact) -> None:
        self.subject: URI = kept[0]  # type: ignore[assignment]
        values: dict[URI, tuple[tuple[str, object], ...]] = {}
        for at in range(1, len(kept), 3):
            predicate: URI = kept[at]  # type: ignore[assignment]
            pair = (kept[at + 1], kept[at + 2])
            held = values.get(predicate)
            values[predicate] = (pair,) if held is None else (*held, pair)  # type: ignore[assignment]
        self.values = values
        """Predicate -> its objects, ``((kind, value), ...)``, as a publication's ``values``."""
