"""Where a poset's time goes (issue 34): cProfile of one-at-a-time insertions, then removals, into
a bulk-built poset whose roots are marked sent to two neighbours (as ``bench.poset_scale``'s
figures "at N"), with the counts the profile does not give.

    python -m bench.poset_profile [--workload shapes] [--size 10000] [--operations 1000]

Counts per insertion: covering tests (``Probe`` keeps each answer once), chains searched from the
index of chain tops, chains whose bottom may be covered (each time that search runs), and the
number of chains against the number of nodes (a chain decomposition helps only if chains are long).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from bench.poset_scale import DESTINATIONS, WORKLOADS, Item, _items
from poset import SubscriptionPoset, chains


@contextmanager
def _counted(counts: Counter[str], probes: list[chains.Probe]) -> Iterator[None]:
    """Counts what each placement asks of the chain decomposition, for the block's duration."""
    tops, bottoms, made = (
        chains.ChainDecomposition._top_candidates,
        chains.ChainDecomposition.bottom_candidates,
        chains.Probe.__init__,
    )

    def top(self, probe, skip):  # type: ignore[no-untyped-def]
        found = tops(self, probe, skip)
        counts["top_candidates"] += len(found)
        return found

    def bottom(self, probe, family=None):  # type: ignore[no-untyped-def]
        found = bottoms(self, probe, family)
        counts["bottom_candidates"] += len(found)
        counts["bottom_searches"] += 1
        return found

    def init(self, *args):  # type: ignore[no-untyped-def]
        made(self, *args)
        probes.append(self)

    chains.ChainDecomposition._top_candidates = top  # type: ignore[method-assign]
    chains.ChainDecomposition.bottom_candidates = bottom  # type: ignore[method-assign]
    chains.Probe.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        chains.ChainDecomposition._top_candidates = tops  # type: ignore[method-assign]
        chains.ChainDecomposition.bottom_candidates = bottoms  # type: ignore[method-assign]
        chains.Probe.__init__ = made  # type: ignore[method-assign]


def placement_arguments(description: str) -> argparse.ArgumentParser:
    """The options of a bench of placements into a bulk-built poset (this one's and
    ``bench.covering_replay``'s)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="shapes")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--operations", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    return parser


def bulk_built(
    workload: str, size: int, operations: int, seed: int
) -> tuple[SubscriptionPoset, list[Item], list[Item]]:
    """A poset of ``size`` subscriptions of ``workload`` built in bulk, its roots marked sent to
    two neighbours; the subscriptions, and ``operations`` more to place."""
    generator = WORKLOADS[workload](seed=seed)
    items = _items(generator, size, 0)
    extra = _items(generator, operations, size)
    poset = SubscriptionPoset()
    poset.insert_many(items)
    for node in poset.roots():
        for destination in DESTINATIONS:
            poset.mark_sent(node, destination, {"origin"})
    return poset, items, extra


def main(argv: list[str] | None = None) -> None:
    parser = placement_arguments(__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=40)
    args = parser.parse_args(argv)
    poset, items, extra = bulk_built(args.workload, args.size, args.operations, args.seed)
    print(f"load average {os.getloadavg()[0]:.1f}")
    counts: Counter[str] = Counter()
    probes: list[chains.Probe] = []
    profile = cProfile.Profile()
    with _counted(counts, probes):
        start = time.process_time()
        profile.enable()
        for item in extra:
            poset.insert(*item)
        profile.disable()
        cpu = time.process_time() - start
    operations = args.operations
    print(f"{operations} insertions into {args.size}: {operations / cpu:.0f}/CPU s (profiled)")
    covered_by = sum(len(probe._covered_by) for probe in probes) / operations
    covers = sum(len(probe._covers) for probe in probes) / operations
    print(
        f"per insertion: {covered_by:.1f} tests 'covers the new one', {covers:.1f} 'covered by "
        f"it'; {counts['top_candidates'] / operations:.1f} chains from the tops; bottoms searched "
        f"{counts['bottom_searches']} times, {counts['bottom_candidates'] / operations:.1f} chains"
    )
    print(f"{len(poset._chains)} chains for {len(poset)} nodes")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.lines)
    gone = random.Random(args.seed).sample(items, operations)
    profile = cProfile.Profile()
    start = time.process_time()
    profile.enable()
    for _, source, subscription_id in gone:
        poset.remove(source, subscription_id)
    profile.disable()
    cpu = time.process_time() - start
    print(f"{operations} removals: {operations / cpu:.0f}/CPU s (profiled)")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.lines)


if __name__ == "__main__":
    main()
