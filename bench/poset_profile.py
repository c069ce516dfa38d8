"""Where a poset's time goes (issue 34): cProfile of one-at-a-time insertions, then removals, into
a bulk-built poset whose routing bookkeeping is a super-peer's with one neighbour (as
``bench.poset_scale``'s figures "at N": ``mark_uncovered``, then ``place`` and ``unplace``),
with the counts the profile does not give.

    python -m bench.poset_profile [--workload shapes] [--size 10000] [--operations 1000]

Counts per insertion and per removal: covering tests (calls of
``poset.poset._covers_compiled``, the poset's and its sent index's, those its predicate
pre-check refutes included), ``sent_labels`` look-ups, and the looks back a removal or a
withdrawal makes at what the node stood in for (``poset.poset``, "Stand-ins"), with the nodes
looked at; per removal of a sent node, the nodes resent.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench.poset_scale import WORKLOADS, Item, _items, mark_uncovered, place, unplace
from poset import SubscriptionPoset
from poset import poset as poset_module


@contextmanager
def counted(counts: Counter[str], poset: SubscriptionPoset) -> Iterator[None]:
    """Counts complete covering tests (the poset's and its sent index's, which keeps the test
    it was built with), ``sent_labels`` look-ups and looks back at stand-ins (with the nodes
    looked at), for the block's duration."""
    tests: Callable[..., bool] = poset_module._covers_compiled
    labels = SubscriptionPoset.sent_labels
    below = SubscriptionPoset._below

    def test(*arguments: Any) -> bool:
        counts["covering_tests"] += 1
        return tests(*arguments)

    def sent_labels(self, node, destination):  # type: ignore[no-untyped-def]
        counts["sent_labels"] += 1
        return labels(self, node, destination)

    def looked_back(self, node, ids):  # type: ignore[no-untyped-def]
        found = below(self, node, ids)
        counts["stood_in"] += 1
        counts["stood_in_nodes"] += len(found)
        return found

    poset_module._covers_compiled = test  # type: ignore[assignment]
    poset._sent._covers = test
    SubscriptionPoset.sent_labels = sent_labels  # type: ignore[method-assign]
    SubscriptionPoset._below = looked_back  # type: ignore[method-assign]
    try:
        yield
    finally:
        poset_module._covers_compiled = tests
        poset._sent._covers = tests
        SubscriptionPoset.sent_labels = labels  # type: ignore[method-assign]
        SubscriptionPoset._below = below  # type: ignore[method-assign]


def placement_arguments(description: str) -> argparse.ArgumentParser:
    """The options of a bench of placements into a bulk-built poset."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="shapes")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--operations", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    return parser


def bulk_built(
    workload: str, size: int, operations: int, seed: int
) -> tuple[SubscriptionPoset, list[Item], list[Item]]:
    """A poset of ``size`` subscriptions of ``workload`` built in bulk, marked sent as a
    super-peer with one neighbour would have sent them (``mark_uncovered``); the subscriptions,
    and ``operations`` more to place."""
    generator = WORKLOADS[workload](seed=seed)
    items = _items(generator, size, 0)
    extra = _items(generator, operations, size)
    poset = SubscriptionPoset()
    poset.insert_many(items)
    mark_uncovered(poset)
    return poset, items, extra


def _per(counts: Counter[str], operations: int) -> str:
    found = counts["stood_in_nodes"] / counts["stood_in"] if counts["stood_in"] else 0
    return (
        f"{counts['covering_tests'] / operations:.1f} covering tests, "
        f"{counts['sent_labels'] / operations:.1f} sent_labels look-ups, "
        f"{counts['stood_in'] / operations:.2f} looks back at stand-ins ({found:.1f} nodes each)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = placement_arguments(__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=40)
    args = parser.parse_args(argv)
    operations = args.operations
    poset, items, extra = bulk_built(args.workload, args.size, operations, args.seed)
    gone = random.Random(args.seed).sample(items, operations)
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"{len(poset)} nodes, {poset.statistics().sent_nodes} sent")
    inserting: Counter[str] = Counter()
    with counted(inserting, poset):
        for item in extra:
            place(poset, item)
    print(f"per insertion (a first pass, counted): {_per(inserting, operations)}")
    removing: Counter[str] = Counter()
    with counted(removing, poset):
        resends = [unplace(poset, source, subscription_id) for _, source, subscription_id in gone]
    sent = [count for count in resends if count >= 0]
    print(
        f"per removal (counted): {_per(removing, operations)}; {len(sent)} of {operations} took a sent "
        f"node away, resending {sum(sent) / max(1, len(sent)):.2f} nodes each (at most "
        f"{max(sent, default=0)})"
    )
    poset, items, extra = bulk_built(args.workload, args.size, operations, args.seed)
    profile = cProfile.Profile()
    start = time.process_time()
    profile.enable()
    for item in extra:
        place(poset, item)
    profile.disable()
    cpu = time.process_time() - start
    print(f"{operations} insertions into {args.size}: {operations / cpu:.0f}/CPU s (profiled)")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.lines)
    profile = cProfile.Profile()
    start = time.process_time()
    profile.enable()
    for _, source, subscription_id in gone:
        unplace(poset, source, subscription_id)
    profile.disable()
    cpu = time.process_time() - start
    print(f"{operations} removals: {operations / cpu:.0f}/CPU s (profiled)")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.lines)


if __name__ == "__main__":
    main()
