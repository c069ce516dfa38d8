"""Subscription posets (covering DAGs with per-destination bookkeeping) and the predicate index
that answers which subscriptions match a publication."""

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
