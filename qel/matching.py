"""Matching a publication against a subscription (Definition 4: ans(q, T) is non-empty).

The subscription is already compiled into filters and the publication into a predicate -> values
index, so one test is a few dictionary look-ups and domain checks; no RDF machinery on this path.
"""

from __future__ import annotations

from qel.domains import AnyDomain
from qel.filters import Filter
from qel.model import Publication, Subscription
from qel.terms import KIND_URI


def matches(subscription: Subscription, publication: Publication) -> bool:
    """Whether the publication's triples give the subscription at least one answer."""
    return any(filter_matches(compiled, publication) for compiled in subscription.filters)


def filter_matches(compiled: Filter, publication: Publication) -> bool:
    if not compiled.subject.admits(KIND_URI, publication.subject.value):
        return False
    values = publication.values
    for predicate, domain in compiled.patterns:
        objects = values.get(predicate)
        if objects is None:
            return False
        if isinstance(domain, AnyDomain):
            continue
        admits = domain.admits
        for kind, value in objects:
            if admits(kind, value):
                break
        else:
            return False
    return True
