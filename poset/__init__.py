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
from poset.witness_index import WitnessIndex

__all__ = [
    "Inserted",
    "PosetNode",
    "PosetStatistics",
    "PredicateIndex",
    "PredicateIndexStatistics",
    "Removed",
    "SubscriptionPoset",
    "WitnessIndex",
    "fan_out",
]
