"""An order of subscriptions that mostly puts each one before those it covers, for bulk insertion.

Why. Inserting a subscription costs little when it covers nothing already in the poset: the search
for its successors ends at once. A super-peer that restarts inserts its whole state, in any order
it likes, so ``SubscriptionPoset.insert_many`` inserts the new distinct subscriptions most general
first. The order needs no ``covers`` call and is a heuristic (a wrong guess costs time, never
correctness), but it is exact in the common cases:

* ``q`` covers ``n`` only if some filter of ``q`` uses no predicate that a filter of ``n`` lacks,
  so the fewest predicates of any filter never grows from ``q`` to ``n``: sorting by it first is
  safe;
* among subscriptions of one *family* (the same predicates and the same values everywhere except
  the bounds of ranges), ``q`` covers ``n`` iff each of ``q``'s ranges contains ``n``'s; a range
  ``[a, b]`` is then before every range inside it when ranges sort by ``(a, -b)`` (an absent bound
  first), and a tuple of such keys sorts lexicographically, which extends containment in every
  range at once.
"""

from __future__ import annotations

from qel import Subscription
from qel.domains import Domain, RangeDomain

Key = tuple[object, ...]


def generality_key(subscription: Subscription) -> tuple[int, str, Key]:
    """Sorting by this puts a subscription before the ones it covers, in the cases above."""
    fewest = min(len(compiled.predicates) for compiled in subscription.filters)
    first = subscription.filters[0]
    family = repr(
        (
            len(subscription.filters),
            _shape(first.subject),
            [(predicate.value, _shape(domain)) for predicate, domain in first.patterns],
        )
    )
    bounds = tuple(
        _bounds(domain) for _, domain in first.patterns if isinstance(domain, RangeDomain)
    )
    return fewest, family, bounds


def _shape(domain: Domain) -> object:
    """A domain without its range bounds (they order a family; everything else defines it)."""
    if isinstance(domain, RangeDomain):
        return ("range", domain.kind, domain.low is None, domain.high is None)
    return domain


def _bounds(domain: RangeDomain) -> Key:
    """Wider first: a lower bound ascending, an upper bound descending, an inclusive one first."""
    low = () if domain.low is None else (domain.low, not domain.low_inclusive)
    high = () if domain.high is None else (-domain.high, not domain.high_inclusive)
    return low, high
