"""The subscriptions a super-peer holds, with what was sent where, kept as indexes of the covering
order (``poset.poset``), and the predicate index that answers which subscriptions match a
publication."""

from poset.poset import (
    Inserted,
    PosetNode,
    PosetStatistics,
    Removed,
    SubscriptionPoset,
    fan_out,
)
from poset.predicate_index import PredicateIndex, PredicateIndexStatistics

__all__ = [
    "Inserted",
    "PosetNode",
    "PosetStatistics",
    "PredicateIndex",
    "PredicateIndexStatistics",
    "Removed",
    "SubscriptionPoset",
    "fan_out",
]
